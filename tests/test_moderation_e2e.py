"""Moderation actions through a real ``chorus run --role gateway`` process.

The gateway runs the real Twitch adapter (twitchio 3 against the loopback Twitch) on the Redis
Streams bus of a real Redis. The test stands in for the ``moderation`` plugin: it publishes
``ModerationRequest`` events on ``moderation:twitch``, as a worker would, and the evidence is
what the loopback Twitch saw (the Helix calls, the message gone, the timeout held) and the
entries the gateway wrote to the audit trail.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from redis.asyncio import Redis

from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import moderation_topic
from bot.events import ConversationKey, ModerationRequest
from bot.safety.audit import AuditEntry, read_audit
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import TwitchServer
from tests.moderation_rigs import TWITCH_SCOPES
from tests.test_chat_e2e import base_env, spawn_chorus, stopped
from tests.test_live_pause_e2e import subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHANNEL_LOGIN
from tests.test_twitch_reconnect_e2e import twitch_env

LIMIT = 60.0


async def _audited(redis: Redis, tag: str, count: int) -> list[AuditEntry]:
    """The gateway's ``act`` entries once there are ``count`` (polled, at most ``LIMIT`` s)."""
    entries: list[AuditEntry] = []
    for _ in range(int(LIMIT * 10)):
        entries = [e for e in await read_audit(redis, namespace=tag) if e.direction == "act"]
        if len(entries) >= count:
            return entries
        await asyncio.sleep(0.1)
    raise AssertionError(f"the audit trail holds {len(entries)} actions, not {count}")


async def test_a_gateway_performs_published_moderation_requests_and_audits_them(
    tmp_path: Path, real_redis_url: str, real_redis: Redis, key_tag: str
) -> None:
    channel_id = str(9_000_000_000 + int(key_tag[1:], 16) % 10**9)
    viewer = f"{channel_id}7"
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(channel_id, CHANNEL_LOGIN)
        twitch.grant(BOT_ID, "access-0", "refresh-0", scopes=TWITCH_SCOPES)
        twitch.moderators[channel_id] = {BOT_ID}
        twitch.chat_messages[channel_id] = {"spam-1"}
        env = base_env(tmp_path) | twitch_env(twitch)
        env |= {
            "CHORUS_BUS": "redis",
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS_NAMESPACE": key_tag,
            "TWITCH_TOKEN_STORE": f"file:{tmp_path / 'tokens.json'}",  # no key left in Redis
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
        }
        proc = await spawn_chorus(["run", "--role", "gateway"], env, tmp_path)
        publisher = RedisStreamsBus(real_redis, consumer="plugin", namespace=key_tag)
        try:
            await twitch.wait_until(lambda: subscribed(twitch) >= 4, LIMIT)
            where = ConversationKey(platform="twitch", channel=channel_id)
            topic = moderation_topic("twitch")
            await publisher.publish(
                topic,
                ModerationRequest(
                    conversation=where,
                    action="delete",
                    message_id="spam-1",
                    user_id=viewer,
                    reason="link without !permit",
                    actor="rule:links",
                ),
            )
            await publisher.publish(
                topic,
                ModerationRequest(
                    conversation=where,
                    action="timeout",
                    user_id=viewer,
                    seconds=600,
                    reason="third link",
                    actor="rule:links",
                ),
            )
            await twitch.wait_until(lambda: (channel_id, viewer) in twitch.bans, LIMIT)
            assert twitch.chat_messages[channel_id] == set()
            assert twitch.bans[channel_id, viewer] == 600
            paths = [(c.method, c.path) for c in twitch.moderation_calls]
            assert paths == [
                ("DELETE", "/helix/moderation/chat"),
                ("POST", "/helix/moderation/bans"),
            ]
            entries = await _audited(real_redis, key_tag, 2)
            got = [(e.rule, e.action, e.user_id, e.actor, e.reason) for e in entries]
            assert got == [
                ("delete", "done", viewer, "rule:links", "link without !permit"),
                ("timeout", "done", viewer, "rule:links", "third link"),
            ]
            assert entries[0].message_id == "spam-1"
            assert entries[0].conversation == str(where)
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
            _, err = await stopped(proc)
            await publisher.close()
        assert proc.returncode == 0, err.decode(errors="replace")[-3000:]
