"""``chorus reload`` re-imports a changed plugin in every process: a Discord gateway and two
``--role worker`` processes on real Redis Streams, a plugin module in a folder of the test's own.
Editing the file and running ``chorus reload`` swaps its command's answer without a restart,
and both workers log the swap; a syntax error in the next version keeps the running one (both
workers say why), and a fixed file after it is taken again."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    plain_message,
)
from tests.test_chat_e2e import ROOT, base_env, run_chorus, spawn_chorus
from tests.test_run_full_stack import _forget as remove_run_keys

POSTS = f"/channels/{CHANNEL_ID}/messages"
PLUGIN = '''
from bot.plugins import CommandContext, command


@command
async def version(ctx: CommandContext) -> str:
    """Which version of the plugin answers."""
    return "{answer}"
'''


async def test_reload_swaps_a_command_in_every_worker_and_a_broken_file_keeps_the_old(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    folder = tmp_path / "plugins"
    folder.mkdir()
    module = folder / f"swappable_{key_tag}.py"
    module.write_text(PLUGIN.format(answer="version 1"))
    base = int(key_tag[1:], 16)
    sent = 0
    async with AnthropicServer() as model, DiscordServer() as discord:
        common = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS": "redis",
            "CHORUS_BUS_NAMESPACE": key_tag,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_PLUGINS": module.stem,
            "PYTHONPATH": f"{ROOT}:{folder}",
        }
        discord_env = {
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
        }
        gateway = await spawn_chorus(["run", "--role", "gateway"], common | discord_env, tmp_path)
        workers = [await spawn_chorus(["run", "--role", "worker"], common, tmp_path) for _ in "ab"]

        async def version() -> str:
            nonlocal sent
            sent += 1
            content = f"<@{BOT_ID}> /version"
            event = plain_message(base + sent, content, mentions=[bot_mention()])
            await discord.dispatch("MESSAGE_CREATE", event)
            await discord.wait_for(lambda: len(discord.requests_to("POST", POSTS)) >= sent, 90)
            return str(discord.requests_to("POST", POSTS)[sent - 1].body["content"])

        async def reload() -> None:
            code, out, err = await run_chorus(["reload"], common, tmp_path)
            assert code == 0 and out.count("sent SIGHUP") == 1, (out, err)

        async def until_answer(wanted: str) -> list[str]:
            answers = [await version()]
            for _ in range(60):
                if answers[-1] == wanted:
                    return answers
                await asyncio.sleep(0.5)
                answers.append(await version())
            raise AssertionError(f"never {wanted!r}: {answers}")

        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)  # IDENTIFY
            first = await version()
            module.write_text(PLUGIN.format(answer="version 2"))
            await reload()
            await until_answer("version 2")
            module.write_text(PLUGIN.format(answer="version 3").replace("def version", "def ("))
            await reload()
            kept = await version()
            module.write_text(PLUGIN.format(answer="version 4"))
            await reload()
            await until_answer("version 4")
        finally:
            errors: list[str] = []
            for proc in (gateway, *workers):
                if proc.returncode is None:
                    proc.send_signal(signal.SIGTERM)
                _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
                errors.append(err_bytes.decode())
            for n in range(1, sent + 1):
                await remove_run_keys(real_redis_url, key_tag, base + n)
    assert first == "version 1"
    assert kept == "version 2"  # the broken file kept the running version
    assert not model.requests  # commands only
    plugin = f"plugin={module.stem}"
    for err in errors[1:]:  # each worker
        swapped = [line for line in err.splitlines() if "plugin reloaded" in line]
        assert len(swapped) == 2 and all(plugin in line for line in swapped), err[-3000:]
        refused = [line for line in err.splitlines() if "plugin reload failed" in line]
        assert len(refused) == 1 and "SyntaxError" in refused[0], err[-3000:]
        assert "the previous version stays" in refused[0]
    for proc, err in zip((gateway, *workers), errors, strict=True):
        assert proc.returncode == 0, err[-3000:]
