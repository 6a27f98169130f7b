"""Native chat commands: what a platform with a command picker (Discord) registers.

Every command works as ``/name`` text on every platform; a platform that has native slash
commands also registers the plugins' ones (``NativeCommand``) so they show in its picker. The
adapter only forwards the name and the text after it: the answer comes from the router's
command table, like any other text command.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class NativeCommand:
    """``/name`` and its one-line description (at most 100 characters); it takes free text."""

    name: str
    description: str
