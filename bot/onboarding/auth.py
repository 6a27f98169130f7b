"""``chorus auth twitch`` and ``chorus auth youtube``: sign the bot's account in through the
platform's OAuth flow and store the tokens where ``chorus run`` reads them.

Where they go, and why: both adapters take the bot account's credentials from the settings
(``TWITCH_ACCESS_TOKEN`` / ``TWITCH_REFRESH_TOKEN``, ``YOUTUBE_REFRESH_TOKEN``), read from the
environment or ``.env``. So the tokens are written into ``.env`` (``--env-file``), replacing
those variables and keeping every other line, atomically and mode 0600. For Twitch that is also
what makes the adapter start from the new pair: the pair it refreshes and keeps in the state
store remembers the refresh token it descends from, and a new ``TWITCH_REFRESH_TOKEN`` wins
over it. A variable also set in the process environment would shadow ``.env``: the command says
so.

``chorus auth twitch --broadcaster`` is the broadcaster's sign-in, for what only the
broadcaster's own token may read (channel-point redemptions: ``channel:read:redemptions``). Its
pair is not the bot's, so it does not go into ``.env``: it is stored where the adapter keeps the
bot's refreshed pair (``TWITCH_TOKEN_STORE``: the state store, or beside the token file), per
broadcaster, and the adapter refreshes it there (``adapters/twitch/tokens.broadcaster_store``).

Exit codes: 0 stored, 1 the flow ended without tokens (denied, expired, timed out, refused),
2 a configuration problem (no client id, a broken ``.env``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import prompts
from bot.onboarding import files, finish, twitch_auth, youtube_auth
from bot.onboarding.checks import AuthFailed
from bot.settings import ConfigError, Settings, load_settings
from bot.settings.twitch import CONSOLE_URL
from bot.settings.youtube import CREDENTIALS_URL

# Stores a broadcaster's pair (settings, client id, access, refresh, user id); where it went.
SaveBroadcaster = Callable[..., Awaitable[str]]

EXIT_FAILED = 1
EXIT_CONFIG = 2
TWITCH_REDIRECT = "http://localhost:3000"
YOUTUBE_TIMEOUT = 300.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("platform", choices=("twitch", "youtube"))
    parser.add_argument("--env-file", default=".env", help="where to store the tokens (.env)")
    parser.add_argument(
        "--client-id",
        help="the application's client id (default: TWITCH_CLIENT_ID / YOUTUBE_CLIENT_ID); "
        "stored in the env file too",
    )
    parser.add_argument(
        "--client-secret",
        help="YouTube: the OAuth client's secret (default: YOUTUBE_CLIENT_SECRET); stored too",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        help="seconds to wait for the browser (Twitch: the code's lifetime, YouTube: "
        f"{YOUTUBE_TIMEOUT:g})",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=0,
        help="YouTube: the 127.0.0.1 port that receives Google's redirect (default: a free "
        "one; fix it to forward it over ssh -L from the machine with the browser)",
    )
    parser.add_argument(
        "--broadcaster",
        action="store_true",
        help="Twitch: sign a broadcaster in (not the bot) so the bot may read the channel's "
        "channel-point redemptions; the token goes to the state store (TWITCH_TOKEN_STORE)",
    )
    parser.add_argument(
        "--redirect-uri",
        default=TWITCH_REDIRECT,
        help="Twitch: a redirect URL registered for the application, used in the "
        f"broadcaster's link (default {TWITCH_REDIRECT})",
    )


def sign_in(platform: str, env_file: Path) -> int:
    """``chorus auth <platform>`` with its defaults, storing into ``env_file`` (``chorus init``
    offers it right after writing the file)."""
    parser = argparse.ArgumentParser(prog="chorus auth")
    add_arguments(parser)
    return run(parser.parse_args([platform, "--env-file", str(env_file)]))


def _say(text: str) -> None:
    print(text, flush=True)  # the operator acts on it while the command waits


def run(args: argparse.Namespace, save_broadcaster: SaveBroadcaster | None = None) -> int:
    """Run ``chorus auth``; ``save_broadcaster`` stores a broadcaster's pair (the composition
    root passes the Twitch adapter's, ``adapters.twitch.tokens.save_broadcaster``)."""
    env_file = Path(args.env_file)
    try:
        settings = load_settings(env_file=env_file, warn=False)
    except ConfigError as exc:
        print(f"chorus auth: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    try:
        if args.platform == "twitch":
            return asyncio.run(_twitch(args, settings, env_file, save_broadcaster))
        return asyncio.run(_youtube(args, settings, env_file))
    except ConfigError as exc:
        print(f"chorus auth {args.platform}: {exc}", file=sys.stderr)
        return EXIT_CONFIG
    except AuthFailed as exc:
        print(f"chorus auth {args.platform}: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(f"\nchorus auth {args.platform}: stopped; nothing was stored", file=sys.stderr)
        return 130


def _store(env_file: Path, values: dict[str, str]) -> None:
    files.update_env(env_file, values)
    shadowed = [name for name in values if os.environ.get(name)]
    if shadowed:
        print(
            f"Note: {', '.join(shadowed)} {'is' if len(shadowed) == 1 else 'are'} also set in "
            f"the environment, which wins over {env_file}: unset it there.",
            file=sys.stderr,
        )


async def _twitch(
    args: argparse.Namespace,
    settings: Settings,
    env_file: Path,
    save_broadcaster: SaveBroadcaster | None,
) -> int:
    client_id = (args.client_id or settings.twitch.client_id or "").strip()
    if not client_id:
        raise ConfigError(
            "TWITCH_CLIENT_ID is not set; register an application at "
            f"{CONSOLE_URL} and put its client id in .env, or pass --client-id"
        )
    base = settings.twitch.auth_base_url
    secret = settings.twitch.secret("client_secret")
    if getattr(args, "broadcaster", False):
        return await _twitch_broadcaster(args, settings, client_id, save_broadcaster)
    granted = await twitch_auth.device_flow(
        base, client_id, secret, patience=args.timeout, say=_say
    )
    values = {
        "TWITCH_ACCESS_TOKEN": granted.access_token,
        "TWITCH_REFRESH_TOKEN": granted.refresh_token,
    }
    if args.client_id:
        values = {"TWITCH_CLIENT_ID": client_id} | values
    _store(env_file, values)
    print(
        prompts.render(
            "onboarding/twitch_done",
            login=granted.login,
            user_id=granted.user_id,
            scopes=" ".join(twitch_auth.SCOPES),
            env_file=str(env_file),
            command=finish.command(Path.cwd()),
            url=twitch_auth.broadcaster_url(base, client_id, args.redirect_uri),
            redirect=args.redirect_uri,
            console=CONSOLE_URL,
        )
    )
    return 0


async def _twitch_broadcaster(
    args: argparse.Namespace,
    settings: Settings,
    client_id: str,
    save_broadcaster: SaveBroadcaster | None,
) -> int:
    """The broadcaster's device flow; the pair goes to the adapter's token store."""
    if save_broadcaster is None:
        raise ConfigError("this command cannot store a broadcaster's token")
    twitch = settings.twitch
    granted = await twitch_auth.device_flow(
        twitch.auth_base_url,
        client_id,
        twitch.secret("client_secret"),
        patience=args.timeout,
        say=_say,
        flow=twitch_auth.BROADCASTER,
    )
    if not granted.user_id.isdigit():
        raise AuthFailed("Twitch validated the token without a user id; nothing was stored")
    where = await save_broadcaster(
        settings,
        client_id,
        access=granted.access_token,
        refresh=granted.refresh_token,
        user_id=granted.user_id,
    )
    print(
        prompts.render(
            "onboarding/twitch_broadcaster_done",
            login=granted.login,
            user_id=granted.user_id,
            scopes=" ".join(twitch_auth.REDEMPTION_SCOPES),
            store=where,
            command=finish.command(Path.cwd()),
        )
    )
    return 0


async def _youtube(args: argparse.Namespace, settings: Settings, env_file: Path) -> int:
    section = settings.youtube
    client_id = (args.client_id or section.client_id or "").strip()
    secret = args.client_secret or (
        section.client_secret.get_secret_value() if section.client_secret else ""
    )
    for variable, value in (("YOUTUBE_CLIENT_ID", client_id), ("YOUTUBE_CLIENT_SECRET", secret)):
        if not value.strip():
            raise ConfigError(
                f"{variable} is not set; create an OAuth client (type: Desktop app) at "
                f"{CREDENTIALS_URL} and put its id and secret in .env, or pass "
                "--client-id and --client-secret"
            )
    timeout = args.timeout if args.timeout is not None else YOUTUBE_TIMEOUT
    channel = await youtube_auth.installed_app_flow(
        section, client_id, secret.strip(), patience=timeout, port=args.port, say=_say
    )
    values = {"YOUTUBE_REFRESH_TOKEN": channel.refresh_token}
    if args.client_secret:
        values = {"YOUTUBE_CLIENT_SECRET": secret.strip()} | values
    if args.client_id:
        values = {"YOUTUBE_CLIENT_ID": client_id} | values
    _store(env_file, values)
    print(
        prompts.render(
            "onboarding/youtube_done",
            title=channel.title,
            channel_id=channel.channel_id,
            env_file=str(env_file),
            command=finish.command(Path.cwd()),
        )
    )
    return 0
