"""``/forget`` over the Redis Streams bus, as an operator runs it: ``chorus run --role all`` with
``CHORUS_BUS=redis`` on a real Redis, the Discord adapter against its loopback gateway and REST,
the Anthropic SDK against its loopback server. Two people talk to the bot, one runs
``/forget``; afterwards no stream of the namespace holds a word of theirs or an answer to them,
and the other person's entries are all still there."""

from __future__ import annotations

import asyncio
import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from bot.state import connect, keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    plain_message,
)
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_run_full_stack import _forget as remove_run_keys

POSTS = f"/channels/{CHANNEL_ID}/messages"


def posted(discord: DiscordServer, count: int) -> Callable[[], bool]:
    return lambda: len(discord.requests_to("POST", POSTS)) >= count


def person(user_id: int, name: str) -> dict[str, Any]:
    return {"username": name, "discriminator": "0", "id": str(user_id), "avatar": None}


async def stream_entries(url: str, namespace: str) -> list[str]:
    """The JSON of every entry in every stream of ``namespace``."""
    redis = await connect.open_redis(url)
    try:
        found: list[str] = []
        async for name in redis.scan_iter(match=keys.bus_streams_pattern(namespace)):
            rows = cast("list[tuple[str, dict[str, str]]]", await redis.xrange(name))
            found += [fields["e"] for _, fields in rows]
        assert await redis.exists(keys.bus_retention(namespace))  # the retention sweep ran
        return found
    finally:
        await redis.aclose()


async def remove_user_keys(url: str, user_ids: list[int]) -> None:
    redis = await connect.open_redis(url)
    try:
        for user_id in map(str, user_ids):
            doomed = [k async for k in redis.scan_iter(match=f"chorus:v1:user:discord:{user_id}:*")]
            doomed.append(keys.insights_job("discord", user_id))
            await redis.delete(*doomed)
            member = keys.insights_member("discord", user_id)
            await redis.zrem(keys.insights_due(), member)
            await redis.zrem(keys.insights_deadline(), member)
    finally:
        await redis.aclose()


async def test_forget_erases_the_users_entries_from_the_streams_of_a_running_bot(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    base = int(key_tag[1:], 16)  # unique ids per run: the real Redis remembers them
    ada, bob = base + 1, base + 2
    ada_secret, bob_words = f"ada-secret-{key_tag}", f"bob-words-{key_tag}"
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.replies.extend([f"answer-for-ada-{key_tag}", f"answer-for-bob-{key_tag}"])
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS": "redis",
            "CHORUS_BUS_NAMESPACE": key_tag,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "PYTHONPATH": str(ROOT),
        }
        proc = await spawn_chorus(["run", "--role", "all"], env, tmp_path)
        said = [(ada, "ada", ada_secret), (bob, "bob", bob_words), (ada, "ada", "/forget")]
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)  # IDENTIFY
            for n, (user_id, name, text) in enumerate(said):
                payload = plain_message(
                    base + 10 + n,
                    f"<@{BOT_ID}> {text}",
                    author=person(user_id, name),
                    mentions=[bot_mention()],
                )
                await discord.dispatch("MESSAGE_CREATE", payload)
                await discord.wait_for(posted(discord, n + 1), limit=90)
            entries = await stream_entries(real_redis_url, key_tag)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            for n in range(len(said)):
                await remove_run_keys(real_redis_url, key_tag, base + 10 + n)
            await remove_user_keys(real_redis_url, [ada, bob])
        assert proc.returncode == 0, err.decode()[-3000:]
        forgot = discord.requests_to("POST", POSTS)[2].body["content"]
        assert "2 messages and replies still queued for delivery" in forgot, forgot
        assert [e for e in entries if ada_secret in e or "answer-for-ada" in e] == []
        assert len([e for e in entries if bob_words in e]) == 1
        assert len([e for e in entries if "answer-for-bob" in e]) == 1
        (command,) = [json.loads(e) for e in entries if '"/forget"' in e]  # kept: acked after
        assert command["author"]["id"] == str(ada)
