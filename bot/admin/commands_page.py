"""The Commands page: a channel's custom commands (the ``commands`` built-in plugin), from the
dashboard.

The page lists the channels that have commands added in chat (the plugin records them), and for
one channel its commands: those of ``chorus.toml`` (read-only here: edit the file, or the
Config page) and those added in chat or here, which an operator may add, edit and delete. They
are the very values the plugin keeps in its store (``ctx.store.channel``, key ``defined``, as
JSON under ``chorus:v1:plugin:commands:*``), read and written through the plugin store of
``bot/state``, so the next ``!command`` in that channel, in any worker, answers with the change.
Each change is a POST needing the ``operator`` role (bot/admin/accounts.py) and an audit entry
(``commands:edit``); what a form holds is checked as ``!addcom`` checks it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from bot.admin.views import Sources
from bot.state import keys
from bot.state.plugin_store import RedisPluginStore

PLUGIN = "commands"
DEFINED, PLACES = "defined", "places"  # the plugin's keys (bot/plugins/builtin/commands.py)
NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
PLATFORM = re.compile(r"[a-z0-9_]{1,32}")
ROLES = ("everyone", "subscriber", "moderator")
RESERVED = ("addcom", "editcom", "delcom", "commands")
MAX_TEXT, MAX_COOLDOWN, MAX_COMMANDS = 500, 86_400.0, 1000


def _defined_key(platform: str, channel: str) -> str:
    return keys.plugin_data(PLUGIN, "chan", (platform, channel), DEFINED)


async def _read(kv: RedisPluginStore, key: str) -> Any:
    raw = await kv.get(key)
    return json.loads(raw) if raw else None


async def _write(kv: RedisPluginStore, key: str, value: Any) -> None:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    await kv.put(key, text, ttl=None, owner=None)


def _file_commands(src: Sources) -> dict[str, dict[str, Any]]:
    table = src.settings.file.plugins.get(PLUGIN, {}).get("commands", {})
    return (
        {k: v for k, v in table.items() if isinstance(v, dict)} if isinstance(table, dict) else {}
    )


async def page(src: Sources, query: Mapping[str, str]) -> dict[str, Any]:
    """The values of ``commands.html``: the channels, and the chosen one's commands."""
    kv = RedisPluginStore(src.redis)
    raw = await _read(kv, keys.plugin_data(PLUGIN, "all", (), PLACES))
    places = (
        [p for p in raw if isinstance(p, list) and len(p) == 2] if isinstance(raw, list) else []
    )
    platform, channel = query.get("platform", "").strip(), query.get("channel", "").strip()
    rows: list[dict[str, Any]] = []
    if PLATFORM.fullmatch(platform) and channel:
        defined = await _read(kv, _defined_key(platform, channel))
        for name, spec in sorted((defined or {}).items()):
            if isinstance(spec, dict):
                rows.append({"name": name, **_shown(spec)})
    else:
        platform, channel = "", ""
    files = [{"name": n, **_shown(s)} for n, s in sorted(_file_commands(src).items())]
    return {
        "places": places,
        "platform": platform,
        "channel": channel,
        "rows": rows,
        "files": files,
        "roles": ROLES,
        "enabled": PLUGIN in src.settings.file.plugins or PLUGIN in src.settings.plugins.modules,
    }


def _shown(spec: Mapping[str, Any]) -> dict[str, Any]:
    def seconds(value: Any) -> str:
        return "" if value is None else f"{float(value):g}"

    return {
        "text": str(spec.get("text", "")),
        "role": str(spec.get("role", "everyone")),
        "cooldown": seconds(spec.get("cooldown")),
        "user_cooldown": seconds(spec.get("user_cooldown")),
        "aliases": ",".join(str(a) for a in spec.get("aliases", ())),
    }


def _seconds(form: Mapping[str, str], field: str) -> float | None:
    text = form.get(field, "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{field.replace('_', ' ')}: a number of seconds") from None
    if not 0 <= value <= MAX_COOLDOWN:
        raise ValueError(f"{field.replace('_', ' ')}: 0 to {MAX_COOLDOWN:g} seconds")
    return value


def definition(form: Mapping[str, str]) -> dict[str, Any]:
    """A command as the form gives it, checked as ``!addcom`` checks it (ValueError says what
    is wrong)."""
    text = form.get("text", "").strip()
    if not 1 <= len(text) <= MAX_TEXT:
        raise ValueError(f"the text must be 1-{MAX_TEXT} characters")
    role = form.get("role", "everyone")
    if role not in ROLES:
        raise ValueError(f"the role must be one of {', '.join(ROLES)}")
    aliases = [a.strip().lower().lstrip("!") for a in form.get("aliases", "").split(",")]
    aliases = [a for a in aliases if a]
    for alias in aliases:
        if not NAME.fullmatch(alias) or alias in RESERVED:
            raise ValueError(f"alias {alias!r}: 1-32 lowercase letters, digits, - or _")
    spec: dict[str, Any] = {"text": text, "role": role, "aliases": aliases}
    for field in ("cooldown", "user_cooldown"):
        value = _seconds(form, field)
        if value is not None:
            spec[field] = value
    return spec


async def submit(src: Sources, form: Mapping[str, str]) -> tuple[str, str, str, str]:
    """Save or delete one command: (action done, platform, channel, name); ValueError says why
    nothing changed."""
    platform, channel = form.get("platform", "").strip(), form.get("channel", "").strip()
    name = form.get("name", "").strip().lower().lstrip("!")
    action = form.get("action", "")
    if not PLATFORM.fullmatch(platform) or not channel or len(channel) > 256:
        raise ValueError("choose a platform and a channel id")
    if not NAME.fullmatch(name) or name in RESERVED:
        raise ValueError(f"command {name!r}: 1-32 lowercase letters, digits, - or _")
    if action not in ("save", "delete"):
        raise ValueError("the action must be save or delete")
    kv = RedisPluginStore(src.redis)
    key = _defined_key(platform, channel)
    raw = await _read(kv, key)
    defined: dict[str, Any] = raw if isinstance(raw, dict) else {}
    if action == "delete":
        if defined.pop(name, None) is None:
            raise ValueError(f"there is no command !{name} here")
        if defined:
            await _write(kv, key, defined)
        else:
            await kv.delete(key)
        return "deleted", platform, channel, name
    spec = definition(form)
    files = _file_commands(src)
    taken = {n: n for n in files} | {n: n for n in defined}
    for owner, other in [*files.items(), *defined.items()]:
        for alias in other.get("aliases", ()) if isinstance(other, dict) else ():
            taken[str(alias)] = owner
    for each in (name, *spec["aliases"]):
        if each in files or taken.get(each, name) != name:
            raise ValueError(f"!{each} is already a command or an alias (here or in chorus.toml)")
    if name not in defined and len(defined) >= MAX_COMMANDS:
        raise ValueError(f"this channel has {len(defined)} commands, the most it may have")
    defined[name] = spec
    await _write(kv, key, defined)
    places_key = keys.plugin_data(PLUGIN, "all", (), PLACES)
    places = await _read(kv, places_key)
    known = [p for p in places if isinstance(p, list)] if isinstance(places, list) else []
    if [platform, channel] not in known:
        await _write(kv, places_key, [*known, [platform, channel]])
    return "saved", platform, channel, name
