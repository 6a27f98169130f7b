"""Done when: ``chorus run`` with a ``chorus.toml`` giving two Discord channels different
personas and tool sets, as a real process against the loopback Discord gateway and the real
Anthropic SDK on its loopback server.

- each channel's model requests carry its own persona in the cached system text and only its
  tools (and a tool of the other channel, asked for anyway, is refused as unknown);
- consecutive requests in each channel share a byte-identical prefix up to the earlier one's
  last cache breakpoint;
- ``chorus reload`` (a second real process, from the same directory) refuses a broken file with
  its file, line and key and signals nobody; a SIGHUP with the broken file on disk is refused by
  the bot, which keeps answering with the configuration in force; after a fixed file and
  ``chorus reload`` the personas are swapped without a restart.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.cache_sim import prompt_blocks
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    DiscordServer,
    bot_mention,
    guild_create,
    plain_message,
)
from tests.test_chat_e2e import ROOT, base_env, run_chorus, spawn_chorus

OTHER_ID = CHANNEL_ID + 7  # a second text channel of the fixture guild
PIRATE = "PERSONA-PIRATE-7f3a"
LIBRARIAN = "PERSONA-LIBRARIAN-91c2"

CONFIG = f"""
[agent]
bot_name = "Chorus"

[memory]
insights_enabled = false

[personas.pirate]
name = "Captain Byte"
prompt = "You are Captain Byte, a cheerful pirate. {PIRATE}"

[personas.librarian]
prompt_file = "personas/librarian.md"
style = "quiet and precise"

[[scope]]
match = "discord:{GUILD_ID}/{CHANNEL_ID}"
persona = "pirate"
tools.enabled = ["current_time"]

[[scope]]
match = "discord:{GUILD_ID}/{OTHER_ID}"
persona = "librarian"
tools.enabled = ["fetch_page"]
"""


def _guild() -> dict[str, Any]:
    guild = guild_create()
    channel = dict(guild["channels"][0], id=str(OTHER_ID), name="library", position=1)
    guild["channels"].append(channel)
    return guild


def _system(body: dict[str, Any]) -> str:
    return "".join(block["text"] for block in body["system"])


def _reply(body: dict[str, Any]) -> Any:
    """Asks for ``current_time`` once per conversation's first turn (the librarian's channel
    does not offer it), then answers naming the persona it saw."""
    system = _system(body)
    persona = "pirate" if PIRATE in system else "librarian" if LIBRARIAN in system else "?"
    messages = body["messages"]
    first_turn = sum(1 for m in messages if m["role"] == "assistant") == 0
    if first_turn and "tool_result" not in json.dumps(messages[-1]):
        call = {"id": f"call_{persona}", "name": "current_time", "arguments": {}}
        return {"tool_calls": [call]}
    return f"{persona} answers turn {len(messages)}"


class Stderr:
    """The child's log lines as they come (logfmt), so the test can wait for one."""

    def __init__(self, stream: asyncio.StreamReader) -> None:
        self.lines: list[str] = []
        self._changed = asyncio.Condition()
        self.task = asyncio.create_task(self._read(stream))

    async def _read(self, stream: asyncio.StreamReader) -> None:
        async for raw in stream:
            async with self._changed:
                self.lines.append(raw.decode(errors="replace").rstrip())
                self._changed.notify_all()

    async def wait_for(self, text: str, after: int = 0, limit: float = 60) -> str:
        async with asyncio.timeout(limit), self._changed:
            await self._changed.wait_for(lambda: any(text in x for x in self.lines[after:]))
        return next(x for x in self.lines[after:] if text in x)


async def test_two_channels_two_personas_two_tool_sets_and_a_live_reload(tmp_path: Path) -> None:
    (tmp_path / "personas").mkdir()
    (tmp_path / "personas" / "librarian.md").write_text(f"You are Ms. Quill. {LIBRARIAN}\n")
    config = tmp_path / "chorus.toml"
    config.write_text(CONFIG)
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.default_reply = _reply
        discord.guilds = [_guild()]
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "PYTHONPATH": str(ROOT),
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        assert proc.stderr is not None
        log = Stderr(proc.stderr)
        sent = {CHANNEL_ID: 0, OTHER_ID: 0}
        ids = iter(range(5000, 6000))

        async def ask(channel: int, text: str) -> list[dict[str, Any]]:
            """One mention in ``channel``, answered; the model requests it took."""
            before = len(model.requests)
            message = plain_message(
                next(ids), f"<@{BOT_ID}> {text}", channel_id=channel, mentions=[bot_mention()]
            )
            await discord.dispatch("MESSAGE_CREATE", message)
            sent[channel] += 1
            await discord.wait_request("POST", f"/channels/{channel}/messages", sent[channel])
            return list(model.bodies[before:])

        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)
            turns: dict[int, list[list[dict[str, Any]]]] = {channel: [] for channel in sent}
            for text in ("ahoy, what time is it?", "and tomorrow?", "thanks!"):
                for channel in (CHANNEL_ID, OTHER_ID):
                    turns[channel].append(await ask(channel, text))

            # A broken file: `chorus reload` refuses it (file, line, key) and signals nobody.
            config.write_text(CONFIG.replace('persona = "librarian"', 'persona = "libarian"'))
            code, out, err = await run_chorus(["reload"], env, tmp_path)
            assert code == 2, (out, err)
            assert f"{config}:" in err and "persona" in err and "'librarian'" in err
            # SIGHUP with that file on disk: the bot refuses it and keeps its configuration.
            mark = len(log.lines)
            proc.send_signal(signal.SIGHUP)
            refused = await log.wait_for("configuration reload refused", after=mark)
            assert "libarian" in refused
            (kept,) = await ask(OTHER_ID, "still there?")

            # Swapped personas, applied by `chorus reload` without a restart.
            swapped = CONFIG.replace('persona = "pirate"', 'persona = "@"')
            swapped = swapped.replace('persona = "librarian"', 'persona = "pirate"')
            config.write_text(swapped.replace('persona = "@"', 'persona = "librarian"'))
            mark = len(log.lines)
            code, out, err = await run_chorus(["reload"], env, tmp_path)
            assert code == 0, (out, err)
            assert "sent SIGHUP" in out
            await log.wait_for("configuration reloaded", after=mark)
            (after_reload,) = await ask(CHANNEL_ID, "who are you now?")
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.wait_for(proc.wait(), 60)
            await log.task
        assert proc.returncode == 0, "\n".join(log.lines[-40:])

    pirate, librarian = turns[CHANNEL_ID], turns[OTHER_ID]
    for requests, own, other, tools in (
        (pirate, PIRATE, LIBRARIAN, ["current_time"]),
        (librarian, LIBRARIAN, PIRATE, ["fetch_page"]),
    ):
        bodies = [body for turn in requests for body in turn]
        assert len(requests[0]) == 2 and all(len(turn) == 1 for turn in requests[1:])
        for body in bodies:
            system = _system(body)
            assert own in system and other not in system
            assert [tool["name"] for tool in body["tools"]] == tools
            assert "cache_control" in body["system"][-1]
        # Consecutive requests share the earlier one's prefix, byte for byte, up to its last
        # cache breakpoint: the iterations of a tool loop, and the first requests of
        # consecutive turns (the tail after a turn's last breakpoint is its volatile context).
        firsts = [turn[0] for turn in requests]
        loops = [pair for turn in requests for pair in zip(turn, turn[1:], strict=False)]
        for earlier, later in [*zip(firsts, firsts[1:], strict=False), *loops]:
            blocks_a, blocks_b = prompt_blocks(earlier), prompt_blocks(later)
            last = max(i for i, (_, breakpoint) in enumerate(blocks_a) if breakpoint)
            assert last >= len(earlier["tools"]) + len(earlier["system"]) - 1
            assert [raw for raw, _ in blocks_a[: last + 1]] == [
                raw for raw, _ in blocks_b[: last + 1]
            ]
            assert earlier["tools"] == later["tools"] and earlier["system"] == later["system"]
    # The pirate's clock answered; the librarian's channel does not offer it, so the same call
    # came back as an unknown tool naming what is available there.
    pirate_result = json.dumps(pirate[0][1]["messages"][-1])
    librarian_result = json.dumps(librarian[0][1]["messages"][-1])
    assert '"is_error": true' not in pirate_result and "UTC" in pirate_result
    assert '"is_error": true' in librarian_result and "fetch_page" in librarian_result
    assert "Captain Byte" in _system(pirate[0][0]) and "quiet and precise" in _system(kept)
    assert LIBRARIAN in _system(kept)  # the refused reload changed nothing
    assert LIBRARIAN in _system(after_reload) and PIRATE not in _system(after_reload)
    assert [t["name"] for t in after_reload["tools"]] == ["current_time"]  # tools stay per scope
