"""The configuration page: ``chorus.toml``'s personas and scopes as a form, a diff before
saving, the save itself, and a preview of what a place gets.

A save is: the file's version checked against the form's (a change made meanwhile is shown as
a conflict, never overwritten), the edit checked as a start would check it (bot/admin/
config_file.py; a refusal shows each message next to its field and writes nothing), the file
replaced atomically, every change audited with its before and after values, and every process
asked to reload (bot/state/config_reloads.py; this one at once).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from bot.admin import config_file
from bot.admin.views import Sources
from bot.settings import ConfigError, load_settings
from bot.settings.file import CONFIG_NAME
from bot.state.config_reloads import ConfigReloads

log = logging.getLogger("chorus.admin")

Render = Callable[..., web.Response]
AuditFn = Callable[..., None]


def config_path(src: Sources) -> Path:
    """The file this process loaded, else where a start would look for it."""
    file = src.settings.file
    return file.found or file.path or Path.cwd() / CONFIG_NAME


def _groups(text: str, form: Mapping[str, str] | None = None) -> list[config_file.Table]:
    groups = config_file.tables(text)
    if not form:
        return groups
    return [
        config_file.Table(
            g.name,
            g.title,
            tuple(
                config_file.Field(f.name, f.key, f.kind, f.choices, form.get(f.name, f.value))
                for f in g.fields
            ),
        )
        for g in groups
    ]


def preview(src: Sources, path: Path, scope: str) -> tuple[str, str]:
    """What ``chorus config --scope`` prints for ``scope``, from the file as it is now."""
    if not scope:
        return "", ""
    from bot.router.scope_text import describe_scope

    try:
        settings = load_settings(config=path, warn=False) if path.is_file() else src.settings
        return describe_scope(settings, scope), ""
    except (ValueError, ConfigError) as exc:
        return "", str(exc)


async def page(
    src: Sources, request: web.Request, render: Render, *, can_edit: bool
) -> web.Response:
    path = config_path(src)
    scope = request.query.get("scope", "").strip()
    described, problem = await asyncio.to_thread(preview, src, path, scope)  # a start's load
    if not path.is_file():
        return render(
            request,
            "config",
            page="config",
            missing=str(path),
            can_edit=False,
            scope=scope,
            described=described,
            problem=problem,
            groups=[],
            version="",
            errors={},
            rest=[],
        )
    text = path.read_text(encoding="utf-8")
    try:
        groups = _groups(text)
    except ValueError as exc:  # not TOML any more: a start would refuse it too
        return render(
            request,
            "config",
            page="config",
            missing="",
            can_edit=False,
            scope=scope,
            described=described,
            problem=f"{path}: {exc}",
            groups=[],
            version="",
            errors={},
            rest=[],
        )
    return render(
        request,
        "config",
        page="config",
        missing="",
        can_edit=can_edit,
        scope=scope,
        described=described,
        problem=problem,
        groups=groups,
        version=config_file.version(text),
        errors={},
        rest=[],
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
    """``action=preview``: the diff and a confirm button; ``action=save``: write and reload."""
    form = {k: str(v) for k, v in (await request.post()).items()}
    path = config_path(src)
    if not path.is_file():
        raise web.HTTPConflict(text=f"no configuration file at {path}")
    text = path.read_text(encoding="utf-8")
    prefixes = ("persona.", "personas.", "scope.", "new.")
    fields = {k: v for k, v in form.items() if k.startswith(prefixes)}
    common: dict[str, Any] = {"page": "config", "missing": "", "scope": "", "described": ""}
    if form.get("version", "") != config_file.version(text):
        response = render(request, "config_conflict", **common)
        response.set_status(409)
        return response
    try:
        new_text, changes = config_file.edit(text, fields, secrets)
    except ValueError as exc:
        return _refused(request, render, text, fields, {}, [str(exc)], common)
    if not changes:
        raise web.HTTPSeeOther("/config")
    checked, errors, rest = await asyncio.to_thread(config_file.check, path, new_text)
    if checked is None:
        return _refused(request, render, text, fields, errors, rest, common)
    if form.get("action") != "save":
        checked.unlink(missing_ok=True)
        return render(
            request,
            "config_diff",
            **common,
            diff=config_file.diff(text, new_text, path),
            changes=changes,
            fields=fields,
            version=form["version"],
        )
    if config_file.version(path.read_text(encoding="utf-8")) != form["version"]:
        checked.unlink(missing_ok=True)  # changed while this was being checked
        response = render(request, "config_conflict", **common)
        response.set_status(409)
        return response
    await write_and_reload(src, request, audit, masked, checked, path, changes)
    log.info("configuration file saved from the dashboard", extra={"changes": len(changes)})
    raise web.HTTPSeeOther(saved)


async def write_and_reload(
    src: Sources,
    request: web.Request,
    audit: AuditFn,
    masked: Callable[[str], str],
    checked: Path,
    path: Path,
    changes: Sequence[config_file.Change],
) -> None:
    """Every page's save of a checked file: renamed over ``path``, each change audited (secrets
    masked) and flushed, every process asked to reload, this one reloaded at once."""
    config_file.replace(checked, path)
    for change in changes:
        detail = f"{change.name}: {masked(change.before)!r} -> {masked(change.after)!r}"
        audit(request, "config:edit", "saved", conversation=change.name[:200], detail=detail)
    await src.audit.flush()
    await ConfigReloads(src.redis).ask()
    if src.reload is not None:
        src.reload()


def _refused(
    request: web.Request,
    render: Render,
    text: str,
    fields: Mapping[str, str],
    errors: Mapping[str, str],
    rest: list[str],
    common: Mapping[str, Any],
) -> web.Response:
    groups = _groups(text, fields)
    shown = {f.name for g in groups for f in g.fields}
    unplaced = [line for name, line in errors.items() if name not in shown]  # a new scope's
    response = render(
        request,
        "config",
        **common,
        can_edit=True,
        problem="",
        groups=groups,
        version=config_file.version(text),
        errors=dict(errors),
        rest=[*rest, *unplaced],
        added=fields,
    )
    response.set_status(400)
    return response
