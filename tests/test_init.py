"""``chorus init`` as users meet it: a real process at a real terminal (a pty) in a fresh
directory, each credential tried against loopback stand-ins of the vendor and the platform,
then ``chorus chat`` answering from the files it wrote; and the same run from flags alone."""

from __future__ import annotations

import asyncio
import errno
import os
import pty
import re
import select
import stat
import sys
import time
import tomllib
from pathlib import Path

import pytest

from bot.onboarding import checks
from bot.settings import settings_from
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.base import ScriptedFailure
from tests.loopback.discord_server import DiscordServer
from tests.loopback.openai_server import OpenAIServer
from tests.loopback.slack_server import SlackServer
from tests.loopback.twitch_server import CLIENT_ID, TwitchServer, UserToken
from tests.loopback.youtube_server import YouTubeServer
from tests.test_chat_e2e import ROOT, base_env, run_chorus

DICE = ROOT / "examples" / "plugins" / "chorus_dice"


class Terminal:
    """``chorus`` in a pseudo-terminal: what it prints is read until a pattern appears."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: Path) -> None:
        self.seen = ""
        pid, self.fd = pty.fork()
        if pid == 0:  # the child: becomes chorus, the pty its controlling terminal
            os.chdir(cwd)
            os.execve(sys.executable, [sys.executable, "-m", "bot.cli", *args], env)
        self.pid = pid

    def expect(self, pattern: str, limit: float = 60.0) -> str:
        deadline = time.monotonic() + limit
        while not re.search(pattern, self.seen):
            left = deadline - time.monotonic()
            assert left > 0, f"no {pattern!r} in:\n{self.seen}"
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready and not self._read():
                assert re.search(pattern, self.seen), f"ended without {pattern!r}:\n{self.seen}"
        return self.seen

    def send(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\r")

    def _read(self) -> bool:
        try:
            chunk = os.read(self.fd, 4096)
        except OSError as exc:  # EIO: the child closed the terminal
            if exc.errno != errno.EIO:
                raise
            return False
        self.seen += chunk.decode(errors="replace")
        return bool(chunk)

    def wait(self, limit: float = 60.0) -> int:
        deadline = time.monotonic() + limit
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                self._read()
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                os.close(self.fd)
                return os.waitstatus_to_exitcode(status)
        os.kill(self.pid, 9)
        raise AssertionError(f"chorus init did not end:\n{self.seen}")


def answer_the_wizard(env: dict[str, str], cwd: Path) -> tuple[int, str]:
    term = Terminal(["init"], env, cwd)
    for prompt, reply in [
        (r"Model vendor .*\[anthropic\]: ", "anthropic"),
        (r"Model \[claude-sonnet-4-5\]: ", "claude-test"),
        (r"anthropic API key: ", "sk-ant-wrong"),
        (r"Try again\.", None),
        (r"anthropic API key: $", "sk-ant-good-0123"),
        (r"ok: anthropic answered", None),
        (r"Platforms to connect .*: ", "discord"),
        (r"Discord bot token .*: ", "discord-token-0123"),
        (r"ok: Discord knows the bot as", None),
        (r"The bot's name \[Chorus\]: ", "Ada"),
        (r"Persona: .*: ", 'You are Ada, a cheerful "pirate".'),
        (r"Plugins to load .*: ", "chorus_dice"),
        (r"Turn on the web dashboard .*\[y/N\]: ", "n"),
        (r"Wrote ", None),
    ]:
        term.expect(prompt)
        if reply is not None:
            term.send(reply)
    return term.wait(), term.seen


@pytest.mark.e2e
async def test_init_at_a_terminal_writes_a_setup_that_chorus_chat_answers_with(
    tmp_path: Path,
) -> None:
    clone = tmp_path / "fresh-clone"
    clone.mkdir()
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.listing_failures.append(ScriptedFailure(401, {"error": "invalid x-api-key"}))
        env = base_env(tmp_path) | {
            "ANTHROPIC_BASE_URL": model.base_url,
            "DISCORD_API_BASE_URL": discord.api_url,
            "TERM": "dumb",
            "PYTHONPATH": f"{ROOT}{os.pathsep}{DICE}",
        }
        code, screen = await asyncio.to_thread(answer_the_wizard, env, clone)
        assert code == 0, screen
        assert "sk-ant-good-0123" not in screen and "discord-token-0123" not in screen  # hidden
        assert [r.headers["x-api-key"] for r in model.listings] == [
            "sk-ant-wrong",
            "sk-ant-good-0123",
        ]
        (me,) = discord.requests_to("GET", "/users/@me")
        assert me.headers["authorization"] == "Bot discord-token-0123"

        dotenv = clone / ".env"
        assert stat.S_IMODE(dotenv.stat().st_mode) == 0o600
        assert [line for line in dotenv.read_text().splitlines() if not line.startswith("#")] == [
            "CHORUS_MODEL=anthropic:claude-test",
            "ANTHROPIC_API_KEY=sk-ant-good-0123",
            "DISCORD_TOKEN=discord-token-0123",
        ]
        config = tomllib.loads((clone / "chorus.toml").read_text())
        assert config == {
            "plugins": ["chorus_dice"],
            "persona": {"name": "Ada", "prompt": 'You are Ada, a cheerful "pirate".'},
        }

        model.replies.append("Ahoy!")
        chat_env = base_env(tmp_path) | {
            "ANTHROPIC_BASE_URL": model.base_url,
            "PYTHONPATH": f"{ROOT}{os.pathsep}{DICE}",
        }
        code, out, err = await run_chorus(["chat"], chat_env, clone, b"hello\n")
    assert code == 0, err[-3000:]
    assert out.splitlines() == ["Ahoy!"]
    (request,) = model.requests
    sent = {request.headers.get("x-api-key"), request.headers.get("authorization")}
    assert sent & {"sk-ant-good-0123", "Bearer sk-ant-good-0123"}, request.headers
    assert request.body["model"] == "claude-test"


@pytest.mark.e2e
async def test_init_from_flags_alone_and_it_never_replaces_files_unasked(tmp_path: Path) -> None:
    async with OpenAIServer() as local, SlackServer() as slack:
        env = base_env(tmp_path) | {"SLACK_API_BASE_URL": slack.api_url}
        flags = [
            "init",
            "--vendor=local",
            f"--base-url={local.base_url}",
            "--model=llama-test",
            "--platforms=slack",
            "--slack-bot-token=xoxb-test-token",
            "--slack-app-token=xapp-test",
            "--persona-name=Bo",
            "--plugins=a.b, c",
        ]
        code, out, err = await run_chorus(flags, env, tmp_path)
        assert code == 0, err
        assert "ok: openai answered" in out and "ok: Slack accepted both tokens" in out
        assert "authorization" not in local.listings[0].headers  # a local server needs no key
        written = (tmp_path / ".env").read_text()
        assert f"OPENAI_BASE_URL={local.base_url}" in written
        assert (
            "CHORUS_MODEL=openai:llama-test" in written and "SLACK_APP_TOKEN=xapp-test" in written
        )
        config = tomllib.loads((tmp_path / "chorus.toml").read_text())
        assert config == {"plugins": ["a.b", "c"], "persona": {"name": "Bo"}}

        code, _, err = await run_chorus([*flags[:-2], "--persona-name=Cy"], env, tmp_path)
        assert code == 2 and "exists already; pass --force" in err
        assert "Bo" in (tmp_path / "chorus.toml").read_text()
        code, _, err = await run_chorus([*flags, "--force", "--persona-name=Cy"], env, tmp_path)
        assert code == 0, err
        assert 'name = "Cy"' in (tmp_path / "chorus.toml").read_text()


@pytest.mark.e2e
async def test_a_refused_token_stops_a_scripted_init_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    async with DiscordServer() as discord, OpenAIServer() as model:
        discord.reject_token = True
        env = base_env(tmp_path) | {"DISCORD_API_BASE_URL": discord.api_url}
        flags = ["init", "--vendor=openai", "--api-key=sk-x", f"--base-url={model.base_url}"]
        code, _, err = await run_chorus(
            [*flags, "--platforms=discord", "--discord-token=bad"], env, tmp_path
        )
        assert code == 2 and "DISCORD_TOKEN was refused (401)" in err, err
        assert not (tmp_path / ".env").exists() and not (tmp_path / "chorus.toml").exists()
        code, _, err = await run_chorus(["init", "--vendor=gemini"], env, tmp_path)
        assert code == 2 and "--api-key is needed" in err
        code, _, err = await run_chorus(
            [*flags, "--platforms=discord", "--discord-token=bad", "--no-check"], env, tmp_path
        )
        assert code == 0, err  # --no-check: written untried
        assert "DISCORD_TOKEN=bad" in (tmp_path / ".env").read_text()


async def test_the_twitch_youtube_and_vendor_checks(tmp_path: Path) -> None:
    async with TwitchServer() as twitch, YouTubeServer() as youtube:
        twitch.tokens["user-token"] = UserToken("42", "bot", ("user:bot",))
        settings = settings_from(
            {"TWITCH_AUTH_BASE_URL": twitch.auth_url, "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url}
        )
        good = {"TWITCH_CLIENT_ID": CLIENT_ID, "TWITCH_ACCESS_TOKEN": "user-token"}
        assert (await checks.check_platform("twitch", good, settings)).ok
        other = await checks.check_platform("twitch", good | {"TWITCH_CLIENT_ID": "x"}, settings)
        assert other.refused and "another application" in other.detail
        bad = await checks.check_platform("twitch", good | {"TWITCH_ACCESS_TOKEN": "no"}, settings)
        assert bad.refused
        youtube_values = {
            "YOUTUBE_CLIENT_ID": youtube.client_id,
            "YOUTUBE_CLIENT_SECRET": youtube.client_secret,
            "YOUTUBE_REFRESH_TOKEN": youtube.refresh_token,
        }
        assert (await checks.check_platform("youtube", youtube_values, settings)).ok
        expired = youtube_values | {"YOUTUBE_REFRESH_TOKEN": "1//expired"}
        assert (await checks.check_platform("youtube", expired, settings)).refused
    gone = await checks.check_llm("openai", "k", twitch.url + "/v1", limit=5)
    assert not gone.ok and not gone.refused and "could not reach" in gone.detail
    blocked = await checks.check_llm("anthropic", "k", None)
    assert not blocked.ok and "real anthropic API" in blocked.detail  # the test suite's guard
