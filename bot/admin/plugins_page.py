"""The Plugins page: what each loaded plugin adds, where it is on, what failed to load, and a
settings form built from the plugin's own ``@settings`` model, saved to ``[plugins.NAME]``.

What it lists comes from the plugins this process runs (the ones ``chorus reload`` swapped in
included), or, in a process that runs none (``chorus insights``), from loading them as
``chorus plugins list`` does (bot/plugins/report.py): nothing runs. "On here" is per scope of
the file: the plugin's tools that the scope's tool lists (or the deployment's) allow, and
whether the scope sets the plugin's settings (``[scope.plugins.NAME]``). A plugin whose
settings have an ``enabled`` switch (the built-ins') can be turned on or off per scope there:
the save writes ``enabled`` into that scope's ``[scope.plugins.NAME]``.

A save is the Config page's (bot/admin/config_pages.py): the file's version checked, the edit
made with tomlkit (comments and order kept), the file loaded as a start loads it and the
plugin's settings checked by the plugin's own model exactly as a start checks them
(``build_config``; a refusal shows the start's message by its field and writes nothing), the
file replaced atomically, each change audited, every process asked to reload. A secret field
(``secret("VAR")``) is never a form field: it is read from the environment, and the page says
only whether it is set and by which variable; a value containing a known secret is refused.
"""

from __future__ import annotations

import asyncio
import re
import tomllib
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import tomlkit
from aiohttp import web
from pydantic import SecretStr

from bot.admin import config_file
from bot.admin.config_pages import AuditFn, Render, config_path, write_and_reload
from bot.admin.loaded import current
from bot.admin.views import Sources
from bot.plugins.api import Plugin
from bot.plugins.config import build_config, secret_variables
from bot.plugins.loader import LoadedPlugins, load_plugins
from bot.settings import ConfigError, Settings, load_settings

Kind = Literal["text", "list", "bool", "choice", "number"]


@dataclass(frozen=True, slots=True)
class SettingField:
    """One input of a plugin's form: ``key`` in ``[plugins.NAME]``."""

    key: str
    kind: Kind
    choices: tuple[str, ...]
    value: str  # as the file sets it ("" when not set there)
    default: str
    description: str
    variable: str = ""  # a secret's environment variable (never a form input)
    secret_set: bool = False


def _kind(annotation: Any) -> tuple[Kind, tuple[str, ...]]:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is (
        typing.Union
    )
    inner = args[0] if optional and args else annotation
    origin = typing.get_origin(inner)
    if origin is Literal:
        return "choice", tuple(str(a) for a in typing.get_args(inner))
    if origin in (list, tuple, set, frozenset):
        return "list", ()
    if inner is bool:
        return "bool", ("true", "false")
    if inner in (int, float):
        return "number", ()
    return "text", ()


def fields(plugin: Plugin, table: Mapping[str, Any]) -> list[SettingField]:
    """The form of ``plugin``'s settings model, with the values ``table`` (its
    ``[plugins.NAME]``) sets."""
    model = plugin.settings_model
    if model is None:
        return []
    secrets = secret_variables(model)
    config = plugin.services.config
    found = []
    for key, info in model.model_fields.items():
        kind, choices = _kind(info.annotation)
        default = "" if info.is_required() else config_file.shown(info.default)
        if key in secrets or info.annotation in (SecretStr, SecretStr | None):
            value = getattr(config.base, key, None) if config is not None else None
            found.append(
                SettingField(
                    key,
                    "text",
                    (),
                    "",
                    "",
                    info.description or "",
                    secrets.get(key, "(a secret)"),
                    bool(value),
                )
            )
            continue
        value = config_file.shown(table.get(key)) if key in table else ""
        found.append(SettingField(key, kind, choices, value, default, info.description or ""))
    return found


def _value(kind: Kind, text: str) -> Any:
    """The form's text as the file's value (None: the key is removed, the default applies)."""
    text = text.replace("\r\n", "\n")
    if kind == "list":
        return [line.strip() for line in text.split("\n") if line.strip()] or None
    text = text.strip()
    if not text:
        return None
    if kind == "bool":
        return {"true": True, "false": False}.get(text, text)
    if kind == "number":
        for convert in (int, float):
            try:
                return convert(text)
            except ValueError:
                continue
    return text  # a wrong value is the plugin's model's to refuse, with the start's message


def edit(
    text: str,
    name: str,
    form_fields: list[SettingField],
    form: Mapping[str, str],
    secrets: Iterable[str],
) -> tuple[str, list[config_file.Change]]:
    """The file with ``[plugins.NAME]`` set from the form (only what differs), and the changes.
    ``ValueError`` for a known secret typed into a field."""
    doc = tomlkit.parse(text)
    hidden = [s for s in secrets if len(s) >= 8]
    changes = []
    for field in form_fields:
        wanted = f"plugin.{name}.{field.key}"
        if field.variable or wanted not in form:
            continue
        after = _value(field.kind, form[wanted])
        if config_file.shown(after).strip() == field.value.strip():
            continue
        if any(secret in config_file.shown(after) for secret in hidden):
            raise ValueError(f"{wanted}: a secret belongs in .env, never in the file")
        plugins = doc.get("plugins")
        if plugins is None:
            plugins = tomlkit.table(is_super_table=True)
            doc["plugins"] = plugins
        table = plugins.get(name)
        if table is None:
            if after is None:
                continue
            table = tomlkit.table()
            plugins[name] = table
        if after is None:
            table.pop(field.key, None)
        else:
            table[field.key] = after
        changes.append(
            config_file.Change(f"plugins.{name}.{field.key}", field.value, config_file.shown(after))
        )
    return tomlkit.dumps(doc), changes


def switchable(plugin: Plugin) -> bool:
    """Whether ``plugin``'s settings have a boolean ``enabled`` a scope can set."""
    model = plugin.settings_model
    info = model.model_fields.get("enabled") if model is not None else None
    return info is not None and _kind(info.annotation)[0] == "bool"


def edit_scope(text: str, name: str, index: int, enabled: bool) -> tuple[str, config_file.Change]:
    """The file with ``enabled`` set in the ``index``-th ``[[scope]]``'s ``[scope.plugins.NAME]``
    (made when missing), and the change. ``ValueError`` when there is no such scope."""
    doc = tomlkit.parse(text)
    scopes = doc.get("scope")
    if not isinstance(scopes, list) or not 0 <= index < len(scopes):
        raise ValueError(f"there is no [[scope]] number {index + 1} in the file")
    scope = scopes[index]
    plugins = scope.get("plugins")
    if plugins is None:
        plugins = tomlkit.table(is_super_table=True)
        scope["plugins"] = plugins
    table = plugins.get(name)
    if table is None:
        table = tomlkit.table()
        plugins[name] = table
    before = config_file.shown(table.get("enabled")) if "enabled" in table else ""
    table["enabled"] = enabled
    where = f"scope[{index}] ({scope.get('match', '?')}).plugins.{name}.enabled"
    return tomlkit.dumps(doc), config_file.Change(where, before, config_file.shown(enabled))


def check(
    path: Path, text: str, plugin: Plugin, settings: Settings
) -> tuple[Path | None, dict[str, str], list[str]]:
    """``text`` checked as a start checks it: the file's loader, then the plugin's model over
    its ``[plugins.NAME]`` and every ``[scope.plugins.NAME]``. Valid: the checked file (to
    rename over ``path``); invalid: None, the problems by field key, the rest."""
    checked, errors, rest = config_file.check(path, text)
    if checked is None or plugin.settings_model is None:
        return checked, {}, [*errors.values(), *rest]
    try:
        loaded = load_settings(config=checked, warn=False)
        build_config(plugin.name, plugin.settings_model, loaded.file, settings.variable)
    except ConfigError as exc:
        checked.unlink(missing_ok=True)
        by_key: dict[str, str] = {}
        others = []
        at = re.compile(rf"(?<![\w.])plugins\.{re.escape(plugin.name)}\.(\w+)")
        for line in str(exc).replace(str(checked), str(path)).splitlines()[1:]:
            line = line.strip()
            found = at.search(line)
            if found and "[[scope]]" not in line:
                by_key.setdefault(found[1], line)
            elif line:
                others.append(line)
        return None, by_key, others
    except BaseException:
        checked.unlink(missing_ok=True)
        raise
    return checked, {}, []


def _loaded(src: Sources) -> LoadedPlugins:
    if isinstance(src.plugins, LoadedPlugins):
        return src.plugins
    settings = src.settings
    return load_plugins(settings.plugins, file=settings.file, variables=settings.variable)


def _origin(plugin: Plugin) -> tuple[str, str]:
    source = plugin.source
    return (source.origin if source else "?"), getattr(plugin.module, "__file__", None) or "?"


def _on_here(settings: Settings, plugin: Plugin) -> list[dict[str, Any]]:
    tools = [t.spec.name for t in plugin.tools]
    deployment = settings.tools
    rows = []
    for scope in settings.file.scopes:
        lists = scope.tools
        enabled = lists.enabled if lists and lists.enabled is not None else deployment.tools_enabled
        disabled = (
            lists.disabled if lists and lists.disabled is not None else deployment.tools_disabled
        ) or frozenset()
        on = [t for t in tools if (enabled is None or t in enabled) and t not in disabled]
        own = (scope.plugins or {}).get(plugin.name)
        on_here = None
        if switchable(plugin) and plugin.services.config is not None:
            base = getattr(plugin.services.config.base, "enabled", True)
            on_here = bool((own or {}).get("enabled", base))
        rows.append(
            {"match": scope.match, "tools": on, "own": sorted(own or {}), "enabled": on_here}
        )
    return rows


def _table(text: str, name: str) -> dict[str, Any]:
    try:
        found = tomllib.loads(text).get("plugins", {}).get(name, {})
    except tomllib.TOMLDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


def _rows(settings: Settings, loaded: LoadedPlugins, text: str) -> list[dict[str, Any]]:
    rows = []
    for plugin in loaded.plugins:
        origin, where = _origin(plugin)
        rows.append(
            {
                "name": plugin.name,
                "origin": origin,
                "where": where,
                "tools": [(t.spec.name, t.spec.description.splitlines()[0]) for t in plugin.tools],
                "commands": [(c.name, c.summary) for c in plugin.commands],
                "events": [f"on_{e.kind}: {e.name}" for e in plugin.events],
                "timers": [f"{t.name}: {t.schedule}" for t in plugin.timers],
                "hooks": [f"{h.kind}: {h.name}" for h in plugin.hooks],
                "model": plugin.settings_model.__name__ if plugin.settings_model else "",
                "fields": fields(plugin, _table(text, plugin.name)),
                "scopes": _on_here(settings, plugin),
                "switchable": switchable(plugin),
            }
        )
    return rows


async def page(
    src: Sources,
    request: web.Request,
    render: Render,
    *,
    can_edit: bool,
    errors: Mapping[str, Mapping[str, str]] | None = None,
    rest: Mapping[str, list[str]] | None = None,
    typed: Mapping[str, str] | None = None,
) -> web.Response:
    loaded = await asyncio.to_thread(_loaded, src)
    path = config_path(src)
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return render(
        request,
        "plugins",
        page="plugins",
        plugins=_rows(await current(src), loaded, text),
        failed=sorted(loaded.failed.items()),
        can_edit=can_edit and path.is_file(),
        missing="" if path.is_file() else str(path),
        version=config_file.version(text),
        errors=errors or {},
        rest=rest or {},
        typed=typed or {},
    )


async def submit(
    src: Sources,
    request: web.Request,
    render: Render,
    audit: AuditFn,
    masked: Callable[[str], str],
    saved: str,
    secrets: list[str],
) -> web.StreamResponse:
    """Save one plugin's settings form (``plugin`` names it) as the module docstring says."""
    form = {k: str(v) for k, v in (await request.post()).items()}
    name = form.get("plugin", "")
    loaded = await asyncio.to_thread(_loaded, src)
    plugin = next((p for p in loaded.plugins if p.name == name), None)
    if plugin is None or plugin.settings_model is None:
        raise web.HTTPNotFound(text=f"no loaded plugin {name!r} with settings")
    path = config_path(src)
    if not path.is_file():
        raise web.HTTPConflict(text=f"no configuration file at {path}")
    text = path.read_text(encoding="utf-8")
    if form.get("version", "") != config_file.version(text):
        response = render(request, "config_conflict", page="plugins")
        response.set_status(409)
        return response
    typed = {k: v for k, v in form.items() if k.startswith(f"plugin.{name}.")}
    try:
        if "scope" in form:  # a scope's on/off switch
            if not switchable(plugin) or form.get("enabled") not in ("true", "false"):
                raise web.HTTPBadRequest(text=f"plugin {name!r} has no on/off switch per scope")
            index = int(form["scope"]) if form["scope"].isdigit() else -1
            new_text, change = edit_scope(text, name, index, form["enabled"] == "true")
            changes = [change]
        else:
            new_text, changes = edit(text, name, fields(plugin, _table(text, name)), form, secrets)
    except ValueError as exc:
        return await _refused(src, request, render, name, {}, [str(exc)], typed)
    if not changes:
        raise web.HTTPSeeOther("/plugins")
    checked, errors, rest = await asyncio.to_thread(check, path, new_text, plugin, src.settings)
    if checked is None:
        return await _refused(src, request, render, name, errors, rest, typed)
    if config_file.version(path.read_text(encoding="utf-8")) != form["version"]:
        checked.unlink(missing_ok=True)  # changed while this was being checked
        response = render(request, "config_conflict", page="plugins")
        response.set_status(409)
        return response
    await write_and_reload(src, request, audit, masked, checked, path, changes)
    raise web.HTTPSeeOther(saved)


async def _refused(
    src: Sources,
    request: web.Request,
    render: Render,
    name: str,
    errors: Mapping[str, str],
    rest: list[str],
    typed: Mapping[str, str],
) -> web.Response:
    response = await page(
        src,
        request,
        render,
        can_edit=True,
        errors={name: dict(errors)},
        rest={name: rest},
        typed=typed,
    )
    response.set_status(400)
    return response
