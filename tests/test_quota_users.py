"""Quotas in Redis (the embedded store and a real server): counted and checked in one atomic
step, one notice per period, tokens added by the commit, the cost cap reserved at admission and
settled by the commit (concurrent turns see each other's reservations; a released or lapsed one
frees its room), exemptions, ``/usage``'s figures, and every key with a TTL."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey, Role, utcnow
from bot.quota.users import QuotaLimits, Quotas, counters, period_ids
from bot.safety.gate import SafetyGate
from bot.safety.policy import Policies
from bot.settings import QuotaSettings
from bot.state import connect, keys
from bot.state.cost import HOLD_SECONDS, Reservation, Spent, micro
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import TurnChanges
from tests.outage_rig import redis_binary
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.redis_server import free_port, start_redis, stop_redis


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


NOW = datetime(2025, 3, 4, 10, 15, 0, tzinfo=UTC)
pytestmark = pytest.mark.redis


def said(tag: str, user: str = "ada", channel: str = "c", *, mod: bool = False) -> ChatMessage:
    roles = frozenset({Role.MODERATOR}) if mod else frozenset()
    return ChatMessage(
        platform="discord",
        id=f"{user}-{tag}",
        conversation=ConversationKey(platform="discord", channel=f"{channel}-{tag}"),
        author=Author(id=f"{user}-{tag}", display_name=user, roles=roles),
        text="hi",
    )


async def commit(redis: Redis, quotas: Quotas, limits: QuotaLimits, message: ChatMessage,
                 tokens: int, cost: float | None = None, *, exempt: bool = False,
                 reserved: Reservation | None = None) -> None:  # fmt: skip
    added = quotas.usage_counters(limits, message, NOW, tokens=tokens, exempt=exempt)
    held = reserved or quotas.cost.reservation(message.id, 0, NOW)
    settle = quotas.cost.settle_change(held, micro(cost)) if cost or reserved else None
    await RedisTurnStore(redis).write(TurnChanges(usage=added, cost=settle))


def test_period_ids_and_what_is_left_of_them() -> None:
    periods = period_ids(NOW)
    assert periods["hour"] == ("h2025030410", 45 * 60)
    assert periods["day"] == ("d20250304", 13 * 3600 + 45 * 60)


async def test_messages_are_counted_up_to_the_limit_then_one_notice(
    redis_client: Redis, key_tag: str
) -> None:
    quotas, limits = Quotas(redis_client, namespace=key_tag), QuotaLimits(user_messages_hour=3)
    message = said(key_tag)
    results = [await quotas.admit(limits, message, NOW, exempt=False) for _ in range(6)]
    assert results[:3] == [None, None, None]
    first, *later = results[3:]
    assert first is not None and first.notice and first.rule == "quota:user_messages_hour"
    assert first.limit == 3 and first.resets_in == 45 * 60
    assert all(r is not None and not r.notice for r in later)  # one notice per period
    assert await quotas.usage(message, NOW) == {"hour": (3, 0), "day": (3, 0)}


async def test_the_limit_holds_under_concurrent_admits(redis_client: Redis, key_tag: str) -> None:
    quotas, limits = Quotas(redis_client, namespace=key_tag), QuotaLimits(channel_messages_day=10)
    messages = [said(key_tag, user=f"u{n}") for n in range(40)]
    results = await asyncio.gather(*(quotas.admit(limits, m, NOW, exempt=False) for m in messages))
    assert sum(r is None for r in results) == 10
    notices = [r for r in results if r is not None and r.notice]
    assert len(notices) == 1 and notices[0].scope == "chan"


async def test_tokens_are_added_by_the_commit_and_stop_the_next_message(
    redis_client: Redis, key_tag: str
) -> None:
    quotas, limits = Quotas(redis_client, namespace=key_tag), QuotaLimits(user_tokens_day=1000)
    message = said(key_tag)
    assert await quotas.admit(limits, message, NOW, exempt=False) is None
    await commit(redis_client, quotas, limits, message, tokens=600)
    assert await quotas.admit(limits, message, NOW, exempt=False) is None
    await commit(redis_client, quotas, limits, message, tokens=600)
    refused = await quotas.admit(limits, message, NOW, exempt=False)
    assert refused is not None and refused.unit == "tokens" and refused.period == "day"
    assert await quotas.usage(message, NOW) == {"hour": (2, 1200), "day": (2, 1200)}


async def test_tokens_spent_outside_a_turn_count_and_then_refuse_without_a_message(
    redis_client: Redis, key_tag: str
) -> None:
    """A plugin's ``ctx.ask``: ``tokens_over`` reads the token counters (counting no message),
    ``add_tokens`` adds to the author's and the channel's; exempt users are neither."""
    quotas = Quotas(redis_client, namespace=key_tag)
    limits = QuotaLimits(user_tokens_hour=100, channel_tokens_day=1000)
    message = said(key_tag)
    assert await quotas.tokens_over(limits, message, NOW, exempt=False) is None
    await quotas.add_tokens(limits, message, NOW, tokens=60, exempt=False)
    assert await quotas.tokens_over(limits, message, NOW, exempt=False) is None
    await quotas.add_tokens(limits, message, NOW, tokens=40, exempt=False)
    refused = await quotas.tokens_over(limits, message, NOW, exempt=False)
    assert refused is not None and refused.rule == "quota:user_tokens_hour"
    assert refused.resets_in == 45 * 60 and not refused.notice
    assert await quotas.tokens_over(limits, message, NOW, exempt=True) is None
    await quotas.add_tokens(limits, message, NOW, tokens=5000, exempt=True)  # not counted
    rows = await quotas.store.read([c.key for c in counters(limits, message, NOW)])
    assert rows == [(0, 100)] * 4  # tokens on all four counters, no message counted
    for c in counters(limits, message, NOW):
        assert 0 < await redis_client.ttl(c.key) <= c.ttl


async def test_the_cost_cap_holds_for_everyone_exempt_or_not(
    redis_client: Redis, key_tag: str
) -> None:
    quotas = Quotas(redis_client, namespace=key_tag)
    limits = QuotaLimits(user_messages_hour=1, cost_usd_per_day=0.01)
    mod = said(key_tag, "mod", mod=True)
    for _ in range(3):  # exempt: the per-user limit of 1 does not apply
        assert await quotas.admit(limits, mod, NOW, exempt=True) is None
    await commit(redis_client, quotas, limits, mod, tokens=10, cost=0.02, exempt=True)
    refused = await quotas.admit(limits, mod, NOW, exempt=True)
    assert refused is not None and refused.scope == "cost" and refused.notice
    other = said(key_tag, "bo", channel="elsewhere")
    refused = await quotas.admit(limits, other, NOW, exempt=False)
    assert refused is not None and refused.scope == "cost"
    assert refused.notice  # one notice per channel: this one has not had it


async def test_the_cost_cap_is_reserved_at_admission_so_simultaneous_turns_see_each_other(
    redis_client: Redis, key_tag: str
) -> None:
    """Eight turns at once under a cap of 10,000 micro-USD: each is admitted only while the
    spend plus the reservations in flight stay under the cap, whichever worker admits it."""
    quotas = Quotas(redis_client, namespace=key_tag)
    limits = QuotaLimits(cost_usd_per_day=0.01)
    messages = [said(key_tag, f"u{n}", channel=f"c{n}") for n in range(8)]

    async def admit(message: ChatMessage, amount: int) -> bool:
        reserve = quotas.cost.reservation(message.id, amount, NOW)
        return await quotas.admit(limits, message, NOW, exempt=False, reserve=reserve) is None

    big = await asyncio.gather(*(admit(m, 20_000) for m in messages))  # one answer exhausts it
    assert sum(big) == 1
    assert await quotas.cost.today(NOW) == Spent(0, 20_000)
    await quotas.cost.release(quotas.cost.reservation(messages[big.index(True)].id, 0, NOW))
    small = await asyncio.gather(*(admit(m, 3_000) for m in messages))
    assert sum(small) == 4, "0, 3,000, 6,000 and 9,000 held are under the cap; 12,000 is not"


async def test_a_reservation_is_settled_at_the_real_cost_and_a_lapsed_one_frees_its_room(
    redis_client: Redis, key_tag: str
) -> None:
    quotas, limits = Quotas(redis_client, namespace=key_tag), QuotaLimits(cost_usd_per_day=0.01)
    first, second = said(key_tag, "ada"), said(key_tag, "bo", channel="d")
    reserve = quotas.cost.reservation(first.id, 50_000, NOW)
    assert await quotas.admit(limits, first, NOW, exempt=False, reserve=reserve) is None
    assert await quotas.admit(limits, second, NOW, exempt=False) is not None, "held: refused"
    await commit(redis_client, quotas, limits, first, tokens=10, cost=0.004, reserved=reserve)
    assert await quotas.cost.today(NOW) == Spent(4_000, 0), "the real cost replaced the hold"
    assert await quotas.admit(limits, second, NOW, exempt=False) is None
    unsettled = quotas.cost.reservation(second.id, 50_000, NOW)
    third = said(key_tag, "cy", channel="e")
    assert await quotas.admit(limits, third, NOW, exempt=False, reserve=unsettled) is None
    assert await quotas.admit(limits, third, NOW, exempt=False) is not None
    later = NOW.replace(minute=59)  # the unsettled hold lapsed (its worker died)
    assert (later - NOW).total_seconds() > HOLD_SECONDS
    assert await quotas.admit(limits, third, later, exempt=False) is None
    assert await quotas.cost.today(later) == Spent(4_000, 0)


async def test_a_live_batch_turn_counts_to_its_channel_only(
    redis_client: Redis, key_tag: str
) -> None:
    quotas, limits = Quotas(redis_client, namespace=key_tag), QuotaLimits(user_messages_hour=1)
    message = said(key_tag)
    for _ in range(3):
        assert await quotas.admit(limits, message, NOW, exempt=False, person=False) is None
    assert [c.scope for c in counters(limits, message, NOW, person=False)] == ["chan", "chan"]


async def test_no_limit_set_means_no_redis_at_all(redis_client: Redis, key_tag: str) -> None:
    quotas = Quotas(redis_client, namespace=key_tag)
    assert await quotas.admit(QuotaLimits(), said(key_tag), NOW, exempt=False) is None
    assert [k async for k in redis_client.scan_iter(match=f"*{key_tag}*")] == []


async def test_every_key_has_a_ttl(redis_client: Redis, key_tag: str) -> None:
    quotas = Quotas(redis_client, namespace=key_tag)
    limits = QuotaLimits(user_messages_hour=1, channel_tokens_day=5, cost_usd_per_day=1.0)
    message = said(key_tag)
    await quotas.admit(limits, message, NOW, exempt=False)
    await commit(redis_client, quotas, limits, message, tokens=10, cost=0.5)
    await quotas.admit(limits, message, NOW, exempt=False)  # refused: sets the notice key
    other = said(key_tag, "bo", channel="elsewhere")
    reserve = quotas.cost.reservation(other.id, 1000, NOW)
    assert await quotas.admit(limits, other, NOW, exempt=True, reserve=reserve) is None
    found = [k async for k in redis_client.scan_iter(match=f"*{key_tag}*")]
    assert keys.usage_cost("20250304", key_tag) in found
    assert keys.usage_cost_holds("20250304", key_tag) in found
    assert any(":notice:" in k for k in found)
    for key in found:
        assert await redis_client.ttl(key) > 0, key


@pytest.mark.e2e
async def test_a_quota_check_waits_out_a_redis_outage(tmp_path: Path) -> None:
    """Redis killed before the check and restarted on its port a moment later: the turn's quota
    check waits (like every other Redis step of a turn), then counts, never a crash."""
    binary, port = redis_binary(), free_port()
    server = start_redis(binary, port, tmp_path)
    client = await connect.open_redis(f"redis://127.0.0.1:{port}/0")
    gate = SafetyGate(
        Policies(quota=QuotaSettings(user_messages_hour=5)), quotas=Quotas(client, namespace="o")
    )
    message = said("outage")
    try:
        assert await gate.before_model(message) is None  # connected, counted once
        stop_redis(server)
        check = asyncio.create_task(gate.before_model(message))
        await asyncio.sleep(1.5)  # the outage: nothing answers on the port
        assert not check.done()
        server = start_redis(binary, port, tmp_path)
        assert await asyncio.wait_for(check, 60) is None
        used = await Quotas(client, namespace="o").usage(message, utcnow())
        assert used["hour"] == (1, 0)  # counted after the outage (this server keeps no data)
    finally:
        await client.aclose()
        stop_redis(server)
