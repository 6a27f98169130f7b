"""The quick starts run as written: each fenced ``sh`` block of README's quick starts and of each
platform page's "Get it answering" section is run by bash, command for command, in a directory
laid out like a fresh clone (the Makefile, and ``.venv`` holding this interpreter's installed
``chorus``), and the bot it starts must answer through the loopback stand-ins of the platform and
of OpenAI. Only what a reader brings is supplied from outside the text: the endpoints (the
``*_BASE_URL`` variables in the environment, which win over ``.env``) and, where a stand-in only
knows its own application, the placeholder client id and secret mapped to its values.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    guild_create,
    plain_message,
)
from tests.loopback.openai_server import OpenAIServer
from tests.loopback.slack_server import SlackServer
from tests.loopback.twitch_server import CLIENT_ID, CLIENT_SECRET, TwitchServer
from tests.loopback.youtube_grpc import YouTubeStreamServer
from tests.loopback.youtube_server import YouTubeServer, text_item
from tests.slack_rig import mention as slack_mention
from tests.test_chat_e2e import ROOT, base_env, stopped
from tests.test_live_pause_e2e import line
from tests.test_twitch_e2e import BOT_ID as TWITCH_BOT_ID
from tests.test_twitch_e2e import CHAT

LIMIT = 90.0  # seconds for a process started by make to connect and answer, on a loaded machine
PAGES = {
    "Console": "platforms/console.md",
    "Discord": "platforms/discord.md",
    "Slack": "platforms/slack.md",
    "Twitch": "platforms/twitch.md",
    "YouTube live chat": "platforms/youtube.md",
}


def readme_block(title: str) -> str:
    """The ``sh`` block of README's quick start ``title``."""
    quick = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## Quick start\n", 1)[1]
    section = quick.split(f"\n### {title}\n", 1)[1].split("\n### ", 1)[0].split("\n## ", 1)[0]
    return _only_block(section, f"README, {title}")


def page_block(title: str) -> str:
    """The ``sh`` block of the platform page's "Get it answering" section."""
    page = (ROOT / "docs" / PAGES[title]).read_text(encoding="utf-8")
    section = page.split("\n## Get it answering\n", 1)[1].split("\n## ", 1)[0]
    return _only_block(section, PAGES[title])


def _only_block(section: str, where: str) -> str:
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 1, f"{where}: one sh block expected, found {len(blocks)}"
    return str(blocks[0])


def blocks(title: str) -> list[str]:
    """What the reader of ``title`` runs: README's block, and the page's when it differs."""
    return list(dict.fromkeys([readme_block(title), page_block(title)]))


def test_every_quick_start_and_page_has_its_block() -> None:
    for title in PAGES:
        assert "make run" in readme_block(title).splitlines()[-1], title
        assert blocks(title), title


def fresh_clone(tmp_path: Path) -> Path:
    """A directory as a clone is after its first ``make run``: the Makefile and what it depends
    on, and ``.venv/bin`` (this interpreter's, where ``chorus`` is installed) with the stamp that
    says the install is done, so ``make run`` goes straight to ``.venv/bin/chorus run``."""
    clone = tmp_path / "clone"
    (clone / ".venv").mkdir(parents=True)
    for name in ("Makefile", "pyproject.toml", "constraints.txt"):
        (clone / name).symlink_to(ROOT / name)
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "chorus").is_file(), f"chorus is not installed in {bin_dir}"
    (clone / ".venv" / "bin").symlink_to(bin_dir)
    (clone / ".venv" / ".installed-all").touch()
    return clone


@asynccontextmanager
async def started(
    script: str, env: dict[str, str], cwd: Path, *, stdin: bytes | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``script`` run by bash (``-e``: a failing command stops it), in its own process group so
    that bash, make and chorus stop together at the end."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "-e",
        "-c",
        script,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            os.killpg(proc.pid, signal.SIGTERM)


async def answered_by(
    script: str,
    env: dict[str, str],
    cwd: Path,
    connected: Callable[[], Awaitable[None]],
    ask: Callable[[], Awaitable[str]],
) -> tuple[str, str]:
    """Run ``script``; once ``connected``, ``ask`` a question and return its answer and the log."""
    async with started(script, env, cwd) as proc:
        waiting = asyncio.ensure_future(connected())
        ended = asyncio.ensure_future(proc.wait())
        await asyncio.wait({waiting, ended}, return_when=asyncio.FIRST_COMPLETED)
        if not waiting.done():  # the script ended before the bot connected: say why
            waiting.cancel()
            _, err = await proc.communicate()
            raise AssertionError(f"the quick start ended first:\n{err.decode()[-3000:]}")
        ended.cancel()
        waiting.result()
        try:
            answer = await ask()
        except TimeoutError:  # no answer: say why, from the bot's log
            os.killpg(proc.pid, signal.SIGTERM)
            _, err = await stopped(proc)
            raise AssertionError(f"no answer:\n{err.decode(errors='replace')[-3000:]}") from None
        os.killpg(proc.pid, signal.SIGTERM)
        _, err = await stopped(proc)
    return answer, err.decode(errors="replace")


def model_env(tmp_path: Path, model: OpenAIServer) -> dict[str, str]:
    return base_env(tmp_path) | {"OPENAI_BASE_URL": model.base_url}


def asked_with_the_written_key(model: OpenAIServer) -> None:
    assert model.requests, "the model was never asked"
    assert model.requests[-1].headers["authorization"] == "Bearer sk-your-key"


@pytest.mark.parametrize("script", blocks("Console"))
async def test_the_console_quick_start_answers(tmp_path: Path, script: str) -> None:
    clone = fresh_clone(tmp_path)
    async with OpenAIServer() as model:
        model.replies.append("Hello from the console quick start.")
        async with started(script, model_env(tmp_path, model), clone, stdin=b"hello\n") as proc:
            out, err = await asyncio.wait_for(proc.communicate(b"hello\n"), LIMIT)
        assert proc.returncode == 0, err.decode()[-3000:]
        assert "Hello from the console quick start." in out.decode(), out.decode()
        asked_with_the_written_key(model)
        assert (clone / ".env").read_text() == "OPENAI_API_KEY=sk-your-key\n"


@pytest.mark.parametrize("script", blocks("Discord"))
async def test_the_discord_quick_start_answers_a_mention(tmp_path: Path, script: str) -> None:
    clone = fresh_clone(tmp_path)
    async with OpenAIServer() as model, DiscordServer() as discord:
        discord.guilds = [guild_create()]
        model.replies.append("Hello from the Discord quick start.")
        env = model_env(tmp_path, model) | {
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
        }
        path = f"/channels/{CHANNEL_ID}/messages"

        async def connected() -> None:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=LIMIT)  # IDENTIFY

        async def ask() -> str:
            mention = plain_message(4300, f"<@{BOT_ID}> hello", mentions=[bot_mention()])
            await discord.dispatch("MESSAGE_CREATE", mention)
            await discord.wait_for(lambda: bool(discord.requests_to("POST", path)), LIMIT)
            (post,) = discord.requests_to("POST", path)
            return str(post.body["content"])

        answer, log = await answered_by(script, env, clone, connected, ask)
        assert answer == "Hello from the Discord quick start.", log[-3000:]
        (identify,) = discord.ops(2)
        assert identify.data["token"] == "your-bot-token"
        asked_with_the_written_key(model)


@pytest.mark.parametrize("script", blocks("Twitch"))
async def test_the_twitch_quick_start_answers_a_mention(tmp_path: Path, script: str) -> None:
    channel = ("771000001", "yourchannel")
    clone = fresh_clone(tmp_path)
    # The stand-in knows one application: the placeholders of its id and secret are its own.
    script = script.replace("your-client-id", CLIENT_ID)
    script = script.replace("your-client-secret", CLIENT_SECRET)
    async with OpenAIServer() as model, TwitchServer() as twitch:
        twitch.add_user(TWITCH_BOT_ID, "mybot")
        twitch.add_user(*channel)
        twitch.grant(TWITCH_BOT_ID, "your-bot-access-token", "your-bot-refresh-token")
        model.replies.append("Hello from the Twitch quick start.")
        env = model_env(tmp_path, model) | {
            "TWITCH_API_BASE_URL": twitch.helix_url,
            "TWITCH_AUTH_BASE_URL": twitch.auth_url,
            "TWITCH_EVENTSUB_WS_URL": twitch.ws_url,
        }
        msg_id = "quickstart-1"

        async def connected() -> None:
            await twitch.wait_until(lambda: _subscribed(twitch), LIMIT)

        async def ask() -> str:
            assert await twitch.notify(CHAT, line(channel, msg_id, "hello", "55", mention=True))
            await twitch.wait_until(lambda: bool(_replies(twitch, msg_id)), LIMIT)
            return _replies(twitch, msg_id)[0]

        answer, log = await answered_by(script, env, clone, connected, ask)
        assert answer.endswith("Hello from the Twitch quick start."), log[-3000:]
        asked_with_the_written_key(model)


def _subscribed(twitch: TwitchServer) -> bool:
    live = set(twitch.live_sessions())
    return any(s.type == CHAT and s.session_id in live for s in twitch.subscriptions.values())


def _replies(twitch: TwitchServer, msg_id: str) -> list[str]:
    return [str(s["message"]) for s in twitch.sent if s.get("reply_parent_message_id") == msg_id]


@pytest.mark.parametrize("script", blocks("Slack"))
async def test_the_slack_quick_start_answers_a_mention(tmp_path: Path, script: str) -> None:
    clone = fresh_clone(tmp_path)
    async with (
        OpenAIServer() as model,
        SlackServer(bot_token="xoxb-your-bot-token", app_token="xapp-your-app-token") as slack,
    ):
        reply = "Hello from the Slack quick start."
        model.replies.append(reply)
        env = model_env(tmp_path, model) | {"SLACK_API_BASE_URL": slack.api_url}

        def reached() -> bool:  # posted whole, or streamed: the text reached Slack's API
            return any(reply in json.dumps(r.body) for r in slack.requests)

        async def connected() -> None:
            await slack.wait_for(lambda: slack.socket_connections >= 1, limit=LIMIT)

        async def ask() -> str:
            envelope = await slack.send_envelope("events_api", slack_mention("EvQuick1", "hello"))
            await slack.wait_acked(envelope)
            await slack.wait_for(reached, limit=LIMIT)
            return reply

        _, log = await answered_by(script, env, clone, connected, ask)
        assert "hello" in json.dumps(model.bodies[-1]["messages"]), log[-3000:]
        asked_with_the_written_key(model)


@pytest.mark.parametrize("script", blocks("YouTube live chat"))
async def test_the_youtube_quick_start_answers_a_mention(tmp_path: Path, script: str) -> None:
    clone = fresh_clone(tmp_path)
    async with (
        OpenAIServer() as model,
        YouTubeServer(
            client_id="your-client-id.apps.googleusercontent.com",
            client_secret="your-client-secret",
            refresh_token="your-refresh-token",
        ) as youtube,
    ):
        stream = await YouTubeStreamServer(youtube).start()
        model.replies.append("Hello from the YouTube quick start.")
        env = model_env(tmp_path, model) | {
            "YOUTUBE_API_BASE_URL": youtube.api_base,
            "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
            "YOUTUBE_GRPC_TARGET": stream.target,
            "YOUTUBE_GRPC_INSECURE": "true",  # the loopback endpoint speaks plaintext
        }

        async def connected() -> None:
            await stream.wait_for(lambda: bool(stream.calls), LIMIT)

        async def ask() -> str:
            stream.push(
                text_item("LCC.quick-1", "@Chorus hello", author_id="UCalice", name="Alice")
            )
            await youtube.wait_for(lambda: bool(youtube.inserted), limit=LIMIT)
            (sent,) = youtube.inserted
            return str(sent["snippet"]["textMessageDetails"]["messageText"])

        try:
            answer, log = await answered_by(script, env, clone, connected, ask)
        finally:
            await stream.close()
        assert answer == "@Alice Hello from the YouTube quick start.", log[-3000:]
        asked_with_the_written_key(model)
