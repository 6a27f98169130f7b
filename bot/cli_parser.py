"""The ``chorus`` command line: its subcommands, their options, ``--version``, and an example
in every ``--help``.

Apart from ``bot/cli.py`` (which runs the commands) so the command line reads as one page:
what a user can type, with a line they can copy for each subcommand.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

DISTRIBUTION = "chorus-bot"

EXAMPLES = {
    "chorus": """examples:
  chorus init                      set up a model, platforms and a persona (writes .env)
  chorus auth twitch               sign the bot's Twitch account in (stores its tokens)
  chorus chat                      talk to the bot in this terminal
  chorus run                       start the bot on every configured platform
  chorus <command> --help          the options and an example of each command""",
    "run": """examples:
  chorus run                                  everything in one process
  CHORUS_BUS=redis CHORUS_REDIS_URL=redis://localhost:6379/0 chorus run --role gateway
  CHORUS_BUS=redis CHORUS_REDIS_URL=redis://localhost:6379/0 chorus run --role worker""",
    "chat": """examples:
  chorus chat                                 a conversation in the terminal (Ctrl-D quits)
  chorus chat --verbose                       the same, with the logs on stderr
  printf 'hi\\nwhat did I say?\\n' | chorus chat   one answer per line, for scripts
  echo 'hello' | chorus chat --json           one JSON object per answer""",
    "insights": """examples:
  chorus insights                             the insights worker as its own process
  chorus insights --drain                     analyse every queued job now, then exit""",
    "replay": """examples:
  chorus replay bench/traces/busy_chat.jsonl  the engagement policy over a recorded chat""",
    "config": """examples:
  chorus config                               what is set, what is missing (secrets masked)
  chorus config --scope discord:GUILD/CHANNEL  every setting a message there gets""",
    "reload": """examples:
  chorus reload                               the running bot re-reads chorus.toml and .env""",
    "plugins": """examples:
  chorus plugins list                         each plugin loaded: source, what it adds, errors
  chorus plugins info quotes                  one plugin: version, handlers, settings (masked)""",
    "knowledge": """examples:
  chorus knowledge status                     each knowledge base: chunks, vectors, sources
  chorus knowledge index                      read the sources now and store what changed""",
    "admin": """examples:
  chorus admin add-user ada --role admin      asks for ada's password, creates or replaces ada
  printf '%s\n' "$PASSWORD" | chorus admin add-user ops --role operator
  chorus admin remove-user ada                ada's sessions end at their next request""",
    "twitch": """examples:
  chorus twitch join streamer                 the gateways start reading #streamer (no restart)
  chorus twitch leave streamer                they stop reading it (TWITCH_TRANSPORT=conduit)""",
    "overlay": """examples:
  chorus overlay key twitch:12345             the channel's overlay key (made on first use)
  chorus overlay key twitch:12345 --rotate    a new key; the old overlay URL gets 403 at once""",
    "init": """examples:
  chorus init                                 answer the questions, get a .env
  chorus init --vendor anthropic --platforms discord --non-interactive""",
    "auth": """examples:
  chorus auth twitch                          device code sign-in of the bot account
  chorus auth twitch --broadcaster            a broadcaster's sign-in (channel-point redemptions)
  chorus auth youtube                         Google sign-in of the bot's channel""",
}


def version() -> str:
    """The installed version of Chorus (``0+unknown`` when run from a bare checkout)."""
    from importlib import metadata  # email, zipfile...: imported once the collector is off

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


class _Version(argparse.Action):
    """``--version``: the version is looked up (a scan of the installed distributions) only
    when asked, not each time the command line is parsed."""

    def __init__(self, option_strings: list[str], dest: str, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show program's version number and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        print(f"chorus {version()}")
        parser.exit()


def _command(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, help_text: str
) -> argparse.ArgumentParser:
    return sub.add_parser(
        name,
        help=help_text,
        description=help_text[0].upper() + help_text[1:] + ".",
        epilog=EXAMPLES[name],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def parser() -> argparse.ArgumentParser:
    from bot.onboarding import auth, wizard  # their flags; imported after the collector is off

    top = argparse.ArgumentParser(
        prog="chorus",
        description="Chorus: one AI agent, many chats.",
        epilog=EXAMPLES["chorus"],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    top.add_argument("--version", action=_Version)
    sub = top.add_subparsers(dest="command", required=True)
    run = _command(
        sub, "run", "start the bot on every configured platform (the console when none is)"
    )
    run.add_argument(
        "--role",
        choices=("all", "gateway", "worker"),
        default="all",
        help="all: everything in one process (default); gateway: the platform connections "
        "only; worker: the agent only (scale out with CHORUS_BUS=redis)",
    )
    run.add_argument(
        "--verbose",
        action="store_true",
        help="when it opens the console in a terminal (no platform set up): the logs on stderr",
    )
    chat = _command(sub, "chat", "chat in the terminal; pipe lines in to script it")
    chat.add_argument("--user", default=None, help="speak as this console user (default: $USER)")
    chat.add_argument("--json", action="store_true", help="write one JSON object per answer")
    chat.add_argument(
        "--verbose",
        action="store_true",
        help="show the logs on stderr in a terminal session (default: a file beside the history)",
    )
    insights = _command(sub, "insights", "run the background insights worker as its own process")
    insights.add_argument(
        "--drain",
        action="store_true",
        help="analyse every queued job now (ignoring the debounce) and exit",
    )
    replay = _command(
        sub, "replay", "run a recorded or synthetic chat trace through the engagement policy"
    )
    replay.add_argument("trace", help="a JSONL trace (see bench/traces/busy_chat.jsonl)")
    replay.add_argument(
        "--youtube-read", choices=("stream", "poll"), help="default: YOUTUBE_READ_MODE"
    )
    config = _command(sub, "config", "show what is configured and what is missing")
    config.add_argument("--scope", help="every setting a message there gets, with its source")
    _command(sub, "reload", "re-read chorus.toml and .env in the running bot (SIGHUP)")
    plugins = _command(sub, "plugins", "show the plugins this configuration loads")
    plugins.add_argument("action", choices=("list", "info"))
    plugins.add_argument("name", nargs="?", help="info: the plugin's name")
    knowledge = _command(sub, "knowledge", "show or refresh the knowledge bases in Redis")
    knowledge.add_argument("action", choices=("status", "index"))
    admin = _command(sub, "admin", "manage the dashboard's named accounts (kept in Redis)")
    actions = admin.add_subparsers(dest="action", required=True)
    add = actions.add_parser(
        "add-user", help="create or replace an account; the password from a prompt or stdin"
    )
    add.add_argument("name", help="the account's name (a-z, 0-9, '_', '-')")
    add.add_argument(
        "--role",
        required=True,
        choices=("viewer", "operator", "admin"),
        help="viewer reads; operator also pauses and edits memory; admin also edits the "
        "configuration",
    )
    remove = actions.add_parser("remove-user", help="remove an account (its sessions end)")
    remove.add_argument("name")
    twitch = _command(sub, "twitch", "join or leave a Twitch channel without a restart (conduits)")
    twitch.add_argument("action", choices=("join", "leave"))
    twitch.add_argument("name", help="the channel's login (as in twitch.tv/<login>) or user id")
    overlay = _command(sub, "overlay", "print or rotate a channel's stream overlay key")
    overlay.add_argument("action", choices=("key",))
    overlay.add_argument("channel", help="the channel as platform:channel (twitch:ID)")
    overlay.add_argument("--rotate", action="store_true", help="replace the key")
    init = _command(sub, "init", "set up a model, platforms and a persona: writes .env")
    wizard.add_arguments(init)
    auth_command = _command(
        sub, "auth", "sign the bot's Twitch or YouTube account in and store its tokens in .env"
    )
    auth.add_arguments(auth_command)
    return top
