"""The default store remembers across restarts: ``chorus run`` as a real process on the embedded
store (no ``CHORUS_REDIS_URL``), with Discord against its loopback and the Anthropic SDK against
a loopback model.

Ada teaches it a pin (``/remember``) and a line of conversation; the process is killed
(``kill -9``, once what she said is on disk) or stopped (SIGTERM, at once: a clean stop loses
nothing) and started again on the same data directory; her next question's prompt, as the
loopback model receives it, carries the pin and the earlier exchange. A second ``chorus run`` on
a directory in use stops at start naming it and the holder's pid; a torn last record costs one
warning and the rest loads; ``/forget`` then a compaction leaves no byte of the forgotten text
in any file of the directory.
"""

from __future__ import annotations

import asyncio
import json
import signal
import uuid
from pathlib import Path

import pytest

from tests.discord_rig import discord_env
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    plain_message,
)
from tests.test_chat_e2e import base_env, run_chorus, spawn_chorus

LIMIT = 90.0  # generous: a loaded 2-core machine; every wait ends as soon as its event happens
POSTS = f"/channels/{CHANNEL_ID}/messages"


class Ada:
    """Ada in the loopback Discord channel; message ids stay unique across restarts."""

    def __init__(self, discord: DiscordServer) -> None:
        self.discord = discord
        self.n = 0

    async def says(self, text: str) -> str:
        self.n += 1
        message_id = str(880000 + self.n)
        author = {"username": "ada", "discriminator": "0", "id": "5551", "avatar": None}
        payload = plain_message(
            int(message_id), f"<@{BOT_ID}> {text}", author=author, mentions=[bot_mention()]
        )
        await self.discord.dispatch("MESSAGE_CREATE", payload)

        def answers() -> list[str]:
            return [
                str(r.body.get("content"))
                for r in self.discord.requests_to("POST", POSTS)
                if str((r.body.get("message_reference") or {}).get("message_id")) == message_id
            ]

        await self.discord.wait_for(lambda: bool(answers()), limit=LIMIT)
        return answers()[0]


def env_for(
    tmp_path: Path, data: Path, model: AnthropicServer, discord: DiscordServer, **extra: str
) -> dict[str, str]:
    env = base_env(tmp_path) | {
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": model.base_url,
        "CHORUS_INSIGHTS_ENABLED": "false",
        "CHORUS_LOG_LEVEL": "INFO",
        "CHORUS_DATA_DIR": str(data),
        **discord_env(discord),
        **extra,
    }
    del env["CHORUS_REDIS_URL"]  # the default store
    return env


async def started(
    env: dict[str, str], cwd: Path, discord: DiscordServer
) -> asyncio.subprocess.Process:
    """``chorus run``, once it has identified to the gateway (one more IDENTIFY than before)."""
    identified = len(discord.ops(2))
    proc = await spawn_chorus(["run"], env, cwd)
    try:
        await discord.wait_for(lambda: len(discord.ops(2)) > identified, limit=LIMIT)
    except TimeoutError:
        proc.kill()
        _, err = await proc.communicate()
        raise AssertionError(err.decode(errors="replace")[-3000:]) from None
    return proc


async def ended(proc: asyncio.subprocess.Process) -> str:
    _, err = await asyncio.wait_for(proc.communicate(), LIMIT)
    return err.decode(errors="replace")


def on_disk(data: Path) -> bytes:
    """Every byte of every file under the data directory."""
    return b"".join(p.read_bytes() for p in sorted(data.rglob("*")) if p.is_file())


async def until_on_disk(data: Path, text: str, present: bool = True) -> None:
    async with asyncio.timeout(LIMIT):
        while (text.encode() in on_disk(data)) != present:  # noqa: ASYNC110 (another process's files)
            await asyncio.sleep(0.1)


def last_prompt(model: AnthropicServer) -> str:
    return json.dumps(model.requests[-1].body)


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM"])
async def test_a_restarted_run_answers_with_the_pin_and_the_history(
    tmp_path: Path, stop: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    pin, line = f"I keep bees named Zorblax {tag}", f"My cat is called Quixotica {tag}"
    data = tmp_path / "data"
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.default_reply = lambda body: "noted"
        env = env_for(tmp_path, data, model, discord)
        ada = Ada(discord)
        proc = await started(env, tmp_path, discord)
        try:
            assert "remember" in await ada.says(f"/remember {pin}")
            assert await ada.says(line) == "noted"
            if stop == "kill -9":
                await until_on_disk(data, line)
                proc.kill()
                await proc.wait()
                assert proc.returncode == -signal.SIGKILL
            else:
                proc.send_signal(signal.SIGTERM)  # at once: the last batch is written at exit
                err = await ended(proc)
                assert proc.returncode == 0, err[-3000:]
            proc = await started(env, tmp_path, discord)
            await ada.says(f"what about my bees and my cat {tag}?")
            prompt = last_prompt(model)
            assert pin in prompt, "the pin reached the prompt after the restart"
            assert line in prompt and "noted" in prompt, "so did the earlier exchange"
            proc.send_signal(signal.SIGTERM)
            err = await ended(proc)
            assert f"kept in {data / 'state'}" in err
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_a_second_run_on_the_directory_stops_at_start_naming_it_and_the_holder(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    async with AnthropicServer() as model, DiscordServer() as discord:
        env = env_for(tmp_path, data, model, discord)
        first = await started(env, tmp_path, discord)
        try:
            second = await spawn_chorus(["run"], env, tmp_path)
            err = await ended(second)
            assert second.returncode not in (0, None), err
            assert str(data / "state") in err and f"pid {first.pid}" in err, err[-3000:]
            assert "Traceback" not in err
        finally:
            first.kill()
            await first.wait()


async def test_a_torn_last_record_costs_one_warning_and_the_rest_loads(tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    pin, late = f"I keep bees named Zorblax {tag}", f"A late line {tag}"
    data = tmp_path / "data"
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.default_reply = lambda body: "noted"
        env = env_for(tmp_path, data, model, discord)
        ada = Ada(discord)
        proc = await started(env, tmp_path, discord)
        try:
            await ada.says(f"/remember {pin}")
            await until_on_disk(data, pin)
            await ada.says(late)
            proc.send_signal(signal.SIGTERM)
            await ended(proc)
            logs = sorted((data / "state").glob("log.*"))
            assert len(logs) == 1
            torn = logs[0].read_bytes()
            logs[0].write_bytes(torn[:-9])  # the last batch torn, as by a power loss
            proc = await started(env, tmp_path, discord)
            await ada.says(f"what about my bees and my cat {tag}?")
            assert pin in last_prompt(model)
            proc.send_signal(signal.SIGTERM)
            err = await ended(proc)
            assert err.count("torn or corrupt tail") == 1, err[-3000:]
            assert "Traceback" not in err
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_forget_then_a_compaction_leaves_no_byte_of_the_text(tmp_path: Path) -> None:
    secret = f"my locker code is Xylophagous{uuid.uuid4().hex[:8]}"
    data = tmp_path / "data"
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.default_reply = lambda body: "noted"
        # A compaction every 3 seconds, so the test sees one soon after /forget.
        env = env_for(tmp_path, data, model, discord, CHORUS_DATA_COMPACT_MINUTES="0.05")
        ada = Ada(discord)
        proc = await started(env, tmp_path, discord)
        try:
            await ada.says(f"/remember {secret}")
            await until_on_disk(data, secret)
            await ada.says("/forget")
            await until_on_disk(data, secret, present=False)
            proc.send_signal(signal.SIGTERM)
            await ended(proc)
            assert secret.encode() not in on_disk(data)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()


async def test_a_console_chat_ended_by_its_input_remembers_at_the_next_chat(
    tmp_path: Path,
) -> None:
    """``chorus chat`` on the default store: the end of its input (Ctrl-D) is a clean stop,
    and the next chat's prompt carries the first chat's exchange."""
    line = f"My favourite colour is octarine {uuid.uuid4().hex[:8]}"
    async with AnthropicServer() as model:
        model.default_reply = lambda body: "noted"
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_DATA_DIR": str(tmp_path / "data"),
        }
        del env["CHORUS_REDIS_URL"]
        code, out, err = await run_chorus(["chat"], env, tmp_path, f"{line}\n".encode())
        assert code == 0 and out.splitlines() == ["noted"], err[-3000:]
        code, out, err = await run_chorus(["chat"], env, tmp_path, b"and my colour?\n")
        assert code == 0, err[-3000:]
        assert line in last_prompt(model), "the first chat's line reached the second's prompt"
