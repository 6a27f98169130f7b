"""The admin dashboard's state layer: the turn log, the conversation and names indexes, and the
per-minute timeline, over the ``memory://`` twin and a real Redis (one contract)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.state import keys, turnlog
from bot.state import turnlog as timeline
from bot.state.turnlog import TurnRecord


def rec(i: int, user: str, name: str, decision: turnlog.Decision = "answered") -> TurnRecord:
    return TurnRecord(
        at=1_700_000_000 + i, message_id=f"m{i}", user_id=user, user_name=name, decision=decision
    )


async def test_the_log_keeps_the_newest_records_first_capped_with_a_ttl(
    redis_client: Redis, key_tag: str
) -> None:
    conv = ConversationKey(platform="discord", channel=f"c-{key_tag}")
    total = turnlog.TURN_LOG_MAX + 5
    async with redis_client.pipeline(transaction=True) as pipe:
        turnlog.queue_records(pipe, conv, [rec(i, "u1", "Ada") for i in range(total)])
        await pipe.execute()
    records = await turnlog.read_log(redis_client, conv, limit=500)
    assert len(records) == turnlog.TURN_LOG_MAX
    assert records[0].message_id == f"m{total - 1}"  # newest first
    assert records[-1].message_id == "m5"  # the oldest five fell off
    ttl = await redis_client.ttl(keys.turn_log(conv))
    assert 0 < ttl <= turnlog.TURN_LOG_SECONDS
    await redis_client.zrem(keys.recent_conversations("discord"), str(conv))


async def test_an_unreadable_record_is_skipped_not_fatal(redis_client: Redis, key_tag: str) -> None:
    conv = ConversationKey(platform="slack", channel=f"c-{key_tag}")
    await redis_client.lpush(keys.turn_log(conv), "{not json", rec(1, "u", "U").encode())
    assert [r.message_id for r in await turnlog.read_log(redis_client, conv)] == ["m1"]


async def test_recent_conversations_per_platform_newest_first(
    redis_client: Redis, key_tag: str
) -> None:
    convs = [ConversationKey(platform="twitch", channel=f"{key_tag}-{i}") for i in range(3)]
    for i, conv in enumerate(convs):
        async with redis_client.pipeline(transaction=False) as pipe:
            turnlog.queue_records(pipe, conv, [rec(10 * i, "u", "U")], names=False)
            await pipe.execute()
    found = await turnlog.recent(redis_client, ["twitch"], limit=10_000)
    mine = [c for c, _ in found["twitch"] if key_tag in c.channel]
    assert mine == list(reversed(convs))
    await redis_client.zrem(keys.recent_conversations("twitch"), *map(str, convs))


async def test_people_are_found_by_name_prefix_or_id_each_once(
    redis_client: Redis, key_tag: str
) -> None:
    conv = ConversationKey(platform="discord", channel=f"c-{key_tag}")
    ada, bob = f"Ada{key_tag}", f"Bob{key_tag}"
    async with redis_client.pipeline(transaction=False) as pipe:
        turnlog.queue_records(pipe, conv, [rec(1, f"id-{key_tag}", ada), rec(2, "u9", bob)])
        await pipe.execute()
    # A prefix, in other case, still long enough to be this run's own: the index is shared by
    # every run on the test Redis, and "Ada" plus two characters of a tag met earlier runs' Adas.
    assert await turnlog.find_people(redis_client, ada[:-3].upper()) == [
        (ada.lower(), "discord", f"id-{key_tag}")
    ]
    by_id = await turnlog.find_people(redis_client, f"id-{key_tag}")
    assert by_id == [(f"id-{key_tag}", "discord", f"id-{key_tag}")]
    assert await turnlog.find_people(redis_client, ada, platform="twitch") == []
    assert await turnlog.find_people(redis_client, "   ") == []
    async with redis_client.pipeline(transaction=False) as pipe:
        turnlog.forget_names(pipe, "discord", f"id-{key_tag}", [ada])
        turnlog.forget_names(pipe, "discord", "u9", [bob])
        await pipe.execute()
    assert await turnlog.find_people(redis_client, ada) == []
    assert await turnlog.find_people(redis_client, f"id-{key_tag}") == []


async def test_the_timeline_adds_minute_and_day_counts_and_reads_them_back(
    redis_client: Redis,
) -> None:
    # A minute of its own far in the past, so no other test's counts share it.
    now = datetime(2001, 2, 3, 4, 5, tzinfo=UTC)
    minute, day = keys.timeline("200102030405"), keys.timeline("d20010203")
    await redis_client.delete(minute, day)
    line = timeline.Timeline()
    line.count("in:twitch", 3)
    line.count("out:twitch")
    line.cost(0.0125)
    await line.flush(timeline.TurnLog(redis_client), now)
    line.count("in:discord")
    await line.flush(timeline.TurnLog(redis_client), now)
    await line.flush(timeline.TurnLog(redis_client), now)  # nothing counted: nothing sent
    rows = await timeline.read_minutes(redis_client, now, minutes=3)
    assert [row for _, row in rows[:2]] == [{}, {}]
    assert rows[-1][1] == {"in:twitch": 3, "out:twitch": 1, "cost_micro": 12_500, "in:discord": 1}
    assert timeline.series(rows, "in:") == [0, 0, 4]
    assert (await timeline.read_day(redis_client, now))["in:twitch"] == 3
    assert 0 < await redis_client.ttl(minute) <= timeline.MINUTE_SECONDS
    await redis_client.delete(minute, day)


async def test_a_failed_flush_keeps_the_counts() -> None:
    line = timeline.Timeline()
    line.count("replies", 2)
    broken = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    with pytest.raises(Exception):  # noqa: B017 - any connection error
        await line.flush(timeline.TurnLog(broken), datetime.now(UTC))
    await broken.aclose()
    assert line.pending["replies"] == 2


def test_bad_timeline_buckets_are_refused() -> None:
    with pytest.raises(ValueError, match="yyyymmddHHMM"):
        keys.timeline("2020")
