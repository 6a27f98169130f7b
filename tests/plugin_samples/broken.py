"""A plugin that cannot be imported: the bot must log it and start without it."""

from __future__ import annotations

raise RuntimeError("this plugin is broken on purpose")
