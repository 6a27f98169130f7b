"""Chorus's first-party plugins: built on the public plugin API, shipped with the bot.

``commands`` (custom ``!commands``: ``bot.plugins.builtin.commands``), ``timers`` (periodic
announcements: ``bot.plugins.builtin.timers``) and ``moderation`` (spam filters and the
escalation from a warning to a ban: ``bot.plugins.builtin.moderation``) are ordinary
plugins: they import only ``bot.plugins``' public names (and ``prompts`` for Chorus's own texts), keep their data in
``ctx.store`` and reach the chats through ``ctx.reply``/``ctx.send``, so they are also the API's
proof. What makes them built-in is only how they are enabled: their ``[plugins.NAME]`` table in
``chorus.toml`` (even an empty one) (or the name in ``[plugins] modules`` /
``CHORUS_PLUGINS``) loads them, no package to install. Per place they are switched with their
``enabled`` setting (``[scope.plugins.commands] enabled = false``), like any plugin's settings.
"""

from __future__ import annotations

# name -> the module that is the plugin
BUILTIN: dict[str, str] = {
    "commands": "bot.plugins.builtin.commands",
    "timers": "bot.plugins.builtin.timers",
    "moderation": "bot.plugins.builtin.moderation",
}
