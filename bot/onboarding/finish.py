"""The closing lines of ``chorus init``: what is left to do per platform, the dashboard, where
state lives, and the commands to start, spelled so they work as printed.

A new user runs ``chorus`` however the checkout put it in reach: ``chorus`` on ``PATH``,
``.venv/bin/chorus`` from a clone, or ``python -m bot.cli``. ``command`` spells it the way this
process was started (``sys.argv[0]``, compared with ``shutil.which``), so the printed lines can
be copied as they are; when the files went to another directory (``--dir``) the lines start with
``cd`` there and name the command by its absolute path.
"""

from __future__ import annotations

import asyncio
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import prompts
from bot.onboarding import discord_app
from bot.settings import Settings


def _shown(path: Path, cwd: Path | None) -> str:
    """``path`` relative to ``cwd`` when it is inside it (``.venv/bin/chorus``), else absolute."""
    if cwd is None:
        return str(path)
    try:
        return str(path.relative_to(cwd))
    except ValueError:
        return str(path)


def command(cwd: Path | None, argv0: str | None = None, executable: str | None = None) -> str:
    """How to run ``chorus`` from ``cwd`` (None: from anywhere, an absolute path), as this
    process was started."""
    started = Path(argv0 if argv0 is not None else sys.argv[0])
    if started.name == "chorus":
        found = shutil.which("chorus")
        if found and Path(found).resolve() == started.resolve():
            return "chorus"
        return shlex.quote(_shown(started.absolute(), cwd))
    python = Path(executable or sys.executable).absolute()  # not resolved: a venv's own python
    return f"{shlex.quote(_shown(python, cwd))} -m bot.cli"


def _discord(token: str, settings: Settings) -> str:
    app = asyncio.run(discord_app.application(token, settings))
    if isinstance(app, str):
        return prompts.render("onboarding/discord_unread", reason=app)
    return discord_app.describe(app)


def closing(
    target: Path,
    values: Mapping[str, str],
    platforms: Sequence[str],
    settings: Settings,
    *,
    checked: bool,
    cwd: Path | None = None,
) -> str:
    """Every line ``chorus init`` prints after writing the files."""
    here = (cwd or Path.cwd()).absolute()
    moved = target.absolute().resolve() != here.resolve()
    chorus = command(None if moved else here)
    where = f"cd {shlex.quote(str(target.absolute()))}" if moved else ""
    parts: list[str] = []
    if "discord" in platforms and values.get("DISCORD_TOKEN") and checked:
        parts.append(_discord(values["DISCORD_TOKEN"], settings))
    for platform, variable, text in (
        ("twitch", "TWITCH_REFRESH_TOKEN", "onboarding/twitch_next"),
        ("youtube", "YOUTUBE_REFRESH_TOKEN", "onboarding/youtube_next"),
    ):
        if platform in platforms:
            when = "if its tokens ever stop working" if values.get(variable) else "now"
            shown = f"{where} && {chorus}" if moved else chorus
            parts.append(prompts.render(text, command=shown, when=when))
    if values.get("CHORUS_ADMIN_PORT"):
        parts.append(prompts.render("onboarding/dashboard", port=values["CHORUS_ADMIN_PORT"]))
    redis_url = settings.state.redis_url
    if redis_url.startswith("embedded://"):
        parts.append(
            prompts.render("onboarding/state_embedded", data=str(settings.state.data_path()))
        )
    elif redis_url.startswith("memory://"):
        parts.append(
            prompts.render("onboarding/state_memory", data=str(settings.state.data_path()))
        )
    else:
        parts.append(prompts.render("onboarding/state_redis", data=str(settings.state.data_path())))
    on = ", ".join(platforms) if platforms else "the console"
    cd = f"  {where}" if moved else ""
    parts.append(prompts.render("onboarding/next", cd=cd, command=chorus, platforms=on))
    return "\n\n".join(parts)
