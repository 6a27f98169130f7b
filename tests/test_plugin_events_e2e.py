"""Plugin event handlers in ``chorus run`` (the console, piped): ``on_message`` sees every line
and keeps a count in the plugin's store, ``on_reply`` sees every reply, and handlers that raise,
hang or call ``sys.exit()`` are contained: the bot answers every line, the failures are logged
and counted in ``/metrics`` (``chorus_plugin_events_total``)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import aiohttp

from bot.events import ConversationKey
from bot.state import connect, keys
from bot.state.turnlog import TurnRecord
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import BOT_ID, CHANNEL_ID, GUILD_ID, HUMAN_ID, DiscordServer
from tests.plugin_samples import listener
from tests.redis_server import free_port
from tests.test_chat_e2e import base_env, run_chorus, spawn_chorus

SERIES = 'chorus_plugin_events_total{kind="%s",outcome="%s",plugin="tests.plugin_samples.listener"}'
LINES = ["hello", listener.RAISE, listener.HANG, listener.EXIT, "still there?"]


async def scrape(url: str, wanted: list[str], limit: float = 90) -> str:
    """``/metrics`` once every series in ``wanted`` shows up (it is not listening at first)."""
    text = ""
    async with asyncio.timeout(limit), aiohttp.ClientSession() as http:
        while True:
            try:
                async with http.get(url) as response:
                    text = await response.text()
                if all(series in text for series in wanted):
                    return text
            except aiohttp.ClientConnectionError:
                pass
            await asyncio.sleep(0.2)


async def test_event_handlers_see_everything_and_their_failures_are_contained(
    tmp_path: Path,
) -> None:
    port = free_port()
    log = tmp_path / "listener.log"
    async with AnthropicServer() as model:
        model.replies.extend(f"answer {n}" for n in range(len(LINES)))
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_PLUGINS": "tests.plugin_samples.listener",
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_HEALTH_PORT": str(port),
            "CHORUS_HEALTH_HOST": "127.0.0.1",
            "LISTENER_LOG": str(log),
        }
        proc = await spawn_chorus(["run"], env, tmp_path, stdin=asyncio.subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        try:
            answers = []
            for text in LINES:
                proc.stdin.write(f"{text}\n".encode())
                await proc.stdin.drain()
                answer = await asyncio.wait_for(proc.stdout.readline(), 90)
                answers.append(answer.decode().strip())
            series = SERIES % ("message", "%s")
            metrics = await scrape(
                f"http://127.0.0.1:{port}/metrics",
                [
                    series % "error" + " 2.0",
                    series % "timeout" + " 1.0",
                    SERIES % ("reply", "ok") + " 5.0",
                ],
            )
            proc.stdin.close()
            _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    err = err_bytes.decode()
    assert proc.returncode == 0, err[-3000:]
    assert answers == [f"answer {n}" for n in range(len(LINES))]  # never blocked, never broken
    assert series % "ok" + " 17.0" in metrics, metrics  # 5 lines x 4 handlers - 3 failures
    assert SERIES % ("reply", "ok") + " 5.0" in metrics
    seen = log.read_text().splitlines()
    assert [f"seen {n + 1}: {text}" for n, text in enumerate(LINES)] == [
        s for s in seen if s.startswith("seen")
    ]  # the count kept in the plugin's store
    assert [s for s in seen if s.startswith("replied")][:4] == [
        f"replied: answer {n}" for n in range(4)
    ]
    assert "plugin event handler raised a BaseException; contained" in err
    assert "the listener is broken on purpose" in err
    assert "plugin event handler timed out" in err


async def test_a_plugin_asks_the_model_and_sends_through_the_outbound_check(
    tmp_path: Path, redis_url_real_only: str, key_tag: str
) -> None:
    async with AnthropicServer() as model:
        model.replies.extend(["four"])
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_PLUGINS": "tests.plugin_samples.listener",
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_QUOTA_COST_USD_DAY": "5",  # ask goes through the cost cap's reservation
            "CHORUS_MODERATION_WORDS": "forbiddenword",
            "CHORUS_REDIS_URL": redis_url_real_only,  # to read the turn log afterwards
        }
        lines = b"/askmodel what is 2+2?\n/announce llew si lla\n/announce drowneddibrof a\n"
        code, out, err = await run_chorus(["chat", "--user", key_tag], env, tmp_path, lines)
    redis = await connect.open_redis(redis_url_real_only)
    try:
        conversation = ConversationKey(platform="console", channel=key_tag)
        raw = await redis.lrange(keys.turn_log(conversation), 0, -1)
        await redis.delete(keys.turn_log(conversation), keys.history(conversation))
    finally:
        await redis.aclose()
    assert code == 0, err[-3000:]
    records = [r for r in (TurnRecord.decode(item) for item in raw) if r is not None]
    asked = [r for r in records if r.reason.startswith("plugin ")]
    assert len(asked) == 1, (records, out, err[-3000:])
    assert asked[0].reason == "plugin tests.plugin_samples.listener asked the model"
    assert asked[0].model == "claude-test" and asked[0].output_tokens > 0  # in the turn log
    said = out.splitlines()
    assert said[0] == "model says: four"
    (body,) = model.bodies
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "what is 2+2?"}]}
    ]
    assert body["max_tokens"] == 50 and "tools" not in body
    assert "plugin asked the model" in err and "plugin=tests.plugin_samples.listener" in err
    assert said.count("announced") == 2
    assert "all is well" in said  # the plugin's own message, on a line of its own
    assert not any("forbiddenword" in line for line in said), said  # withheld by the check


async def test_a_plugins_model_calls_are_paid_from_the_users_token_quota(
    tmp_path: Path, redis_url_real_only: str, key_tag: str
) -> None:
    """``ctx.ask`` about a message counts its tokens to the author's quota; once the quota is
    spent the next call is refused (``QuotaReached``) without reaching the model."""
    async with AnthropicServer() as model:
        model.replies.extend(["four", "never asked"])
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_PLUGINS": "tests.plugin_samples.listener",
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_QUOTA_USER_TOKENS_HOUR": "1",
            "CHORUS_QUOTA_EXEMPT_MODERATORS": "false",  # the console's user owns the bot
            "CHORUS_REDIS_URL": redis_url_real_only,  # to read the counters afterwards
        }
        lines = b"/askmodel what is 2+2?\n/askmodel and 3+3?\n"
        code, out, err = await run_chorus(["chat", "--user", key_tag], env, tmp_path, lines)
        asked = len(model.bodies)
    assert code == 0, err[-3000:]
    said = out.splitlines()
    assert said[:2] == ["model says: four", "quota reached: quota:user_tokens_hour"], said
    assert asked == 1  # the refused call never reached the model
    redis = await connect.open_redis(redis_url_real_only)
    try:
        found = [
            k
            async for k in redis.scan_iter(match="*:usage:*:console:*")
            if f":{key_tag}:" in (k.decode() if isinstance(k, bytes) else k)
        ]
        counted = [int(await redis.hget(k, "t") or 0) for k in found]
        if found:
            await redis.delete(*found)
    finally:
        await redis.aclose()
    # the first call's tokens, counted to the user and the channel, per hour and per day
    assert len(found) == 4 and len(set(counted)) == 1 and counted[0] > 1, (found, counted)


async def test_discord_joins_leaves_and_reactions_reach_the_plugins(tmp_path: Path) -> None:
    log = tmp_path / "listener.log"
    newcomer: dict[str, Any] = {"id": "555000111222333444", "username": "newcomer"}
    newcomer |= {"discriminator": "0", "avatar": None, "global_name": None}
    member: dict[str, Any] = {"user": newcomer, "roles": [], "joined_at": "2026-01-01T00:00:00Z"}
    member |= {"deaf": False, "mute": False, "flags": 0}
    reaction: dict[str, Any] = {
        "user_id": str(HUMAN_ID),
        "channel_id": str(CHANNEL_ID),
        "message_id": "777000111222333444",
        "guild_id": str(GUILD_ID),
        "emoji": {"id": None, "name": "👍"},
        "type": 0,
        "burst": False,
    }
    async with AnthropicServer() as model, DiscordServer() as discord:
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_PLUGINS": "tests.plugin_samples.listener",
            "CHORUS_INSIGHTS_ENABLED": "false",
            "LISTENER_LOG": str(log),
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "DISCORD_MEMBERS_INTENT": "true",
        }
        proc = await spawn_chorus(["run"], env, tmp_path)

        def logged() -> list[str]:
            return log.read_text().splitlines() if log.exists() else []

        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)  # IDENTIFY
            await discord.wait_request("PUT", f"/applications/{BOT_ID}/commands")  # ready
            await discord.dispatch("GUILD_MEMBER_ADD", member | {"guild_id": str(GUILD_ID)})
            await discord.dispatch("MESSAGE_REACTION_ADD", reaction)
            await discord.dispatch("MESSAGE_REACTION_REMOVE", reaction)
            await discord.dispatch(
                "GUILD_MEMBER_REMOVE", {"guild_id": str(GUILD_ID), "user": newcomer}
            )
            for _ in range(900):  # the plugin writes a file: poll it (up to 90 s)
                if len(logged()) >= 4:
                    break
                await asyncio.sleep(0.1)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err_bytes.decode()[-3000:]
    identify = discord.ops(2)[0].data
    assert identify["intents"] & (1 << 1)  # GUILD_MEMBERS, asked for by DISCORD_MEMBERS_INTENT
    assert sorted(logged()) == sorted(
        [
            f"member_join: {newcomer['id']} in {GUILD_ID}",  # no system channel: the server
            f"reaction_add: 👍 on 777000111222333444 by {HUMAN_ID}",
            f"reaction_remove: 👍 on 777000111222333444 by {HUMAN_ID}",
            f"member_leave: {newcomer['id']}",
        ]
    )
    assert not model.requests and not discord.requests_to(
        "POST", f"/channels/{CHANNEL_ID}/messages"
    )
