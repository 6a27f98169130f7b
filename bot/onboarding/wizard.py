"""The questions of ``chorus init``, asked at a terminal or answered by flags.

Every answer has a flag (``--vendor``, ``--api-key``, ``--discord-token``...), so a script runs
it without a terminal; at a terminal only what the flags left open is asked, secrets with the
echo off. Each credential is tried as soon as it is given (``checks``): a refused one is asked
again (three times at most), one that could not be tried may be kept. Without a terminal any
failed check stops the run unless ``--no-check``. Nothing is written until every question is
answered, and an existing ``.env`` or ``chorus.toml`` is replaced only after a yes or with
``--force``.

After the files are written it says what is left to do (``finish``): the Discord invite and the
Message Content intent, the ``chorus auth`` command of Twitch and YouTube, the dashboard's URL
(a token is generated when the operator turns it on), where state lives, and the commands to
start, spelled as this ``chorus`` was run so they work as printed.
"""

from __future__ import annotations

import argparse
import getpass
import os
import secrets
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from bot.onboarding import auth, checks, files, finish
from bot.settings import KEY_ENV, ConfigError, Settings, load_settings
from bot.settings.llm import DEFAULT_MODELS

VENDORS = ("anthropic", "openai", "gemini", "local")
BASE_URL_ENV = {
    "anthropic": "ANTHROPIC_BASE_URL",
    "openai": "OPENAI_BASE_URL",
    "gemini": "GOOGLE_GEMINI_BASE_URL",
}
ATTEMPTS = 3
ADMIN_PORT = 8470


@dataclass(frozen=True)
class Question:
    variable: str
    text: str
    secret: bool = True
    later: str = ""  # the ``chorus auth`` platform that gets it when the answer is empty


PLATFORMS: dict[str, tuple[Question, ...]] = {
    "discord": (Question("DISCORD_TOKEN", "Discord bot token (Developer Portal -> Bot)"),),
    "slack": (
        Question("SLACK_BOT_TOKEN", "Slack bot token (xoxb-...)"),
        Question("SLACK_APP_TOKEN", "Slack app-level token for Socket Mode (xapp-...)"),
    ),
    "twitch": (
        Question("TWITCH_CLIENT_ID", "Twitch application client id", secret=False),
        Question("TWITCH_CLIENT_SECRET", "Twitch application client secret"),
        Question("TWITCH_ACCESS_TOKEN", "Twitch access token of the bot account", later="twitch"),
        Question("TWITCH_REFRESH_TOKEN", "Twitch refresh token of the bot account", later="twitch"),
        Question("TWITCH_CHANNELS", "Twitch channels to join (comma list)", secret=False),
    ),
    "youtube": (
        Question("YOUTUBE_CLIENT_ID", "YouTube OAuth client id", secret=False),
        Question("YOUTUBE_CLIENT_SECRET", "YouTube OAuth client secret"),
        Question(
            "YOUTUBE_REFRESH_TOKEN", "YouTube refresh token of the bot's channel", later="youtube"
        ),
    ),
}


class InitError(Exception):
    """Stops ``chorus init`` with a message and exit code 2; nothing was written."""


def flag(variable: str) -> str:
    return variable.lower().replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--vendor",
        choices=VENDORS,
        help="the model vendor (local: any OpenAI-compatible server such as Ollama)",
    )
    parser.add_argument(
        "--api-key",
        help="the vendor's API key (default: its variable in the "
        "environment, e.g. ANTHROPIC_API_KEY)",
    )
    parser.add_argument("--model", help="the model name (default: the vendor's default)")
    parser.add_argument("--base-url", help="the vendor's endpoint, or the local server's URL")
    parser.add_argument(
        "--platforms",
        help="comma list of discord, slack, twitch, youtube ('' or 'none': the console only)",
    )
    for questions in PLATFORMS.values():
        for question in questions:
            parser.add_argument(f"--{flag(question.variable)}", help=question.text)
    parser.add_argument("--persona-name", help="the bot's name (default Chorus)")
    parser.add_argument("--persona-prompt", help="who the bot is and how it talks")
    parser.add_argument("--plugins", help="comma list of plugin modules to load")
    parser.add_argument(
        "--dashboard",
        action=argparse.BooleanOptionalAction,
        help="turn the web dashboard on (a login token is generated into .env) or off "
        "(default: asked at a terminal, off without one)",
    )
    parser.add_argument(
        "--admin-port", type=int, default=ADMIN_PORT, help=f"the dashboard's port ({ADMIN_PORT})"
    )
    parser.add_argument("--dir", default=".", help="where to write .env and chorus.toml")
    parser.add_argument("--force", action="store_true", help="replace existing files")
    parser.add_argument("--no-check", action="store_true", help="do not try the credentials")
    parser.add_argument(
        "--non-interactive",
        action="store_true",
        help="never ask; missing answers are errors (implied without a terminal)",
    )


class Asker:
    """Questions at the terminal, or (without one) the flag's value or the default."""

    def __init__(self, interactive: bool, secret_input: Callable[[str], str] = getpass.getpass):
        self.interactive = interactive
        self._secret_input = secret_input

    def ask(
        self,
        text: str,
        given: str | None,
        *,
        default: str | None = None,
        secret: bool = False,
        needed: str | None = None,
    ) -> str:
        """``given`` (a flag) if set; else the answer (``default`` for an empty one)."""
        if given is not None:
            return given.strip()
        if not self.interactive:
            if default is not None:
                return default
            raise InitError(f"{needed} is needed; pass it, or run chorus init at a terminal")
        shown = f" [{default}]" if default else ""
        while True:
            answer = (self._secret_input if secret else input)(f"{text}{shown}: ").strip()
            if answer or default is not None:
                return answer or (default or "")
            print("  (an answer is needed)")

    def confirm(self, text: str) -> bool:
        if not self.interactive:
            return False
        return input(f"{text} [y/N]: ").strip().lower() in {"y", "yes"}


def run(args: argparse.Namespace) -> int:
    """``chorus init``: 0 written, 1 the operator said no, 2 an error (nothing written)."""
    interactive = sys.stdin.isatty() and not args.non_interactive
    try:
        return _run(args, Asker(interactive))
    except InitError as exc:
        print(f"chorus init: {exc}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, EOFError):
        print("\nchorus init: stopped; nothing was written", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace, asker: Asker) -> int:
    target = Path(args.dir)
    env_path, toml_path = target / ".env", target / "chorus.toml"
    existing = [p for p in (env_path, toml_path) if p.exists()]
    if existing and not args.force:
        names = " and ".join(str(p) for p in existing)
        if not asker.interactive:
            raise InitError(f"{names} exists already; pass --force to replace it")
        if not asker.confirm(f"{names} exists already. Replace it?"):
            print("Nothing was written.")
            return 1
    settings = _environment_settings()
    values: dict[str, str] = {}
    _model(args, asker, settings, values)
    for platform in _platforms(args, asker):
        _platform(platform, args, asker, settings, values)
    name = asker.ask("The bot's name", args.persona_name, default="Chorus")
    prompt = asker.ask(
        "Persona: who the bot is and how it talks, in a few sentences (empty: the default)",
        args.persona_prompt,
        default="",
    )
    plugins_text = asker.ask(
        "Plugins to load (comma list of modules; empty: none)", args.plugins, default=""
    )
    plugins = [p.strip() for p in plugins_text.split(",") if p.strip()]
    dashboard = args.dashboard
    if dashboard is None:
        dashboard = asker.confirm(
            f"Turn on the web dashboard (http://127.0.0.1:{args.admin_port}/, behind a login)?"
        )
    if dashboard and not 1 <= args.admin_port <= 65535:
        raise InitError(f"--admin-port {args.admin_port} is not a port (1-65535)")
    if dashboard:
        values.update(
            CHORUS_ADMIN_PORT=str(args.admin_port), CHORUS_ADMIN_TOKEN=secrets.token_urlsafe(32)
        )
    target.mkdir(parents=True, exist_ok=True)
    files.write_file(env_path, files.render_env(values), private=True)
    files.write_file(toml_path, files.render_toml(name, prompt, plugins), private=False)
    print(f"Wrote {env_path} (secrets, readable only by you) and {toml_path}.")
    platforms = [p for p in PLATFORMS if any(q.variable in values for q in PLATFORMS[p])]
    for platform, variable in (
        ("twitch", "TWITCH_REFRESH_TOKEN"),
        ("youtube", "YOUTUBE_REFRESH_TOKEN"),
    ):
        if (
            platform in platforms
            and variable not in values
            and asker.confirm(
                f"Sign the bot's {platform.capitalize()} account in now, in a browser?"
            )
        ) and auth.sign_in(platform, env_path) == 0:
            values[variable] = "stored"  # for the closing lines only; written by auth
    checked = not args.no_check
    print(finish.closing(target, values, platforms, settings, checked=checked))
    return 0


def _environment_settings() -> Settings:
    """The settings of the environment alone: the endpoints to check against."""
    try:
        return load_settings(env_file=None, warn=False)
    except ConfigError:
        return Settings()


def _model(
    args: argparse.Namespace, asker: Asker, settings: Settings, values: dict[str, str]
) -> None:
    vendor = asker.ask(
        "Model vendor (anthropic, openai, gemini, or local for an OpenAI-compatible server)",
        args.vendor,
        default="anthropic",
    ).lower()
    if vendor not in VENDORS:
        raise InitError(f"unknown vendor {vendor!r}; choose one of {', '.join(VENDORS)}")
    if vendor == "local":
        url = asker.ask("URL of the server", args.base_url, default="http://localhost:11434/v1")
        model = asker.ask("Model name", args.model, default="llama3.2")
        values.update(CHORUS_MODEL=f"openai:{model}", OPENAI_BASE_URL=url)
        key = asker.ask(
            "API key, if the server needs one (empty: none)", args.api_key, default="", secret=True
        )
        if key:
            values["OPENAI_API_KEY"] = key
        _checked(args, asker, partial(checks.check_llm, "openai", key or None, url), "the server")
        return
    model = asker.ask("Model", args.model, default=DEFAULT_MODELS[vendor])
    values["CHORUS_MODEL"] = f"{vendor}:{model}"
    if args.base_url:
        values[BASE_URL_ENV[vendor]] = args.base_url
    base = args.base_url or settings.llm.base_url(vendor)
    given = args.api_key or (os.environ.get(KEY_ENV[vendor]) if not asker.interactive else None)
    for attempt in range(ATTEMPTS):
        key = asker.ask(f"{vendor} API key", given, secret=True, needed="--api-key")
        values[KEY_ENV[vendor]] = key
        if _checked(
            args,
            asker,
            partial(checks.check_llm, vendor, key, base),
            "the key",
            last=attempt == ATTEMPTS - 1 or given is not None,
        ):
            return
        given = None


def _platforms(args: argparse.Namespace, asker: Asker) -> list[str]:
    text = asker.ask(
        "Platforms to connect (comma list of discord, slack, twitch, youtube; "
        "empty: the console only)",
        args.platforms,
        default="",
    )
    chosen = [p.strip().lower() for p in text.split(",") if p.strip()]
    chosen = [p for p in chosen if p != "none"]
    unknown = [p for p in chosen if p not in PLATFORMS]
    if unknown:
        raise InitError(f"unknown platform {unknown[0]!r}; choose from {', '.join(PLATFORMS)}")
    return list(dict.fromkeys(chosen))


def _platform(
    platform: str,
    args: argparse.Namespace,
    asker: Asker,
    settings: Settings,
    values: dict[str, str],
) -> None:
    flags = {
        q.variable: getattr(args, flag(q.variable).replace("-", "_")) for q in PLATFORMS[platform]
    }
    for attempt in range(ATTEMPTS):
        answers = {
            q.variable: asker.ask(
                f"{q.text} (empty: get it with `chorus auth {q.later}`)" if q.later else q.text,
                flags[q.variable],
                secret=q.secret,
                needed=f"--{flag(q.variable)}",
                default="" if q.later else None,
            )
            for q in PLATFORMS[platform]
        }
        values.update({name: value for name, value in answers.items() if value})
        if any(not answers[q.variable] for q in PLATFORMS[platform] if q.later):
            return  # `chorus auth` gets the tokens and tries them
        last = attempt == ATTEMPTS - 1 or all(v is not None for v in flags.values())
        if _checked(
            args,
            asker,
            partial(checks.check_platform, platform, answers, settings),
            f"the {platform} credentials",
            last=last,
        ):
            return
        flags = {q.variable: None for q in PLATFORMS[platform] if q.secret} | {
            q.variable: answers[q.variable] for q in PLATFORMS[platform] if not q.secret
        }


def _checked(
    args: argparse.Namespace,
    asker: Asker,
    check: Callable[[], Coroutine[Any, Any, checks.Check]],
    what: str,
    *,
    last: bool = True,
) -> bool:
    """True when ``check`` passed or the operator keeps the value anyway; False: ask again."""
    if args.no_check:
        return True
    result = checks.run(check())
    if result.ok:
        print(f"  ok: {result.detail}")
        return True
    print(f"  {result.detail}", file=sys.stderr)
    if not asker.interactive:
        raise InitError(
            f"{what} did not pass the check ({result.detail}); fix it or pass --no-check"
        )
    if result.refused and not last:
        print("  Try again.")
        return False
    if asker.confirm(f"Keep {what} anyway?"):
        return True
    if last:
        raise InitError(f"{what} did not pass the check; nothing was written")
    return False
