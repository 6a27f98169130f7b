"""Daily insights token budgets per user and per channel, on both backends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.state import keys
from bot.state.insight_jobs import Budget

NOON = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)


def conv(tag: str, channel: str = "general", thread: str | None = None) -> ConversationKey:
    return ConversationKey(platform="discord", channel=f"{channel}-{tag}", thread=thread)


async def test_charges_add_up_per_user_and_day(redis_client: Redis, key_tag: str) -> None:
    budget = Budget(redis_client, user_daily=100, channel_daily=1000)
    user = f"ada-{key_tag}"
    await budget.charge("discord", user, [conv(key_tag)], 60, NOON)
    assert await budget.exhausted("discord", user, [conv(key_tag)], NOON) is None
    await budget.charge("discord", user, [conv(key_tag)], 40, NOON)
    spent = await budget.exhausted("discord", user, [conv(key_tag)], NOON)
    assert spent is not None and (spent.scope, spent.used, spent.limit) == ("user", 100, 100)
    tomorrow = NOON + timedelta(hours=12)
    assert await budget.exhausted("discord", user, [conv(key_tag)], tomorrow) is None
    assert await budget.used("discord", f"bob-{key_tag}", NOON) == 0


async def test_a_channel_budget_is_shared_by_its_users_and_threads(
    redis_client: Redis, key_tag: str
) -> None:
    budget = Budget(redis_client, user_daily=1000, channel_daily=100)
    await budget.charge("discord", f"ada-{key_tag}", [conv(key_tag, thread="t1")], 70, NOON)
    await budget.charge("discord", f"bob-{key_tag}", [conv(key_tag)], 30, NOON)
    spent = await budget.exhausted("discord", f"cy-{key_tag}", [conv(key_tag, thread="t2")], NOON)
    assert spent is not None and spent.scope == "channel" and spent.used == 100
    assert spent.channel == f"general-{key_tag}"
    other = [conv(key_tag, channel="random")]
    assert await budget.exhausted("discord", f"cy-{key_tag}", other, NOON) is None


async def test_a_zero_budget_skips_everything(redis_client: Redis, key_tag: str) -> None:
    budget = Budget(redis_client, user_daily=0, channel_daily=0)
    assert await budget.exhausted("discord", f"ada-{key_tag}", [], NOON) is not None


async def test_counters_expire_an_hour_after_their_utc_day(
    redis_client: Redis, key_tag: str
) -> None:
    budget = Budget(redis_client, user_daily=100, channel_daily=100)
    user = f"ada-{key_tag}"
    late = datetime(2025, 1, 2, 23, 0, tzinfo=UTC)
    await budget.charge("discord", user, [conv(key_tag)], 5, late)
    for key in (
        keys.budget_user("discord", user, "20250102"),
        keys.budget_channel("discord", f"general-{key_tag}", "20250102"),
    ):
        assert 2 * 3600 - 5 <= await redis_client.ttl(key) <= 2 * 3600
    await budget.charge("discord", user, [], 0, late)  # nothing spent, nothing written
    assert await budget.used("discord", user, late) == 5
