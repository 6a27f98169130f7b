"""The shared quota ledger (bot/quota/ledger.py): one contract for the Redis scripts (embedded
and real Redis) and the in-memory twin the replay uses, and two processes reserving against one
real Redis without ever holding more than the budget allows."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from redis.asyncio import Redis

from bot.quota.ledger import QuotaLedger
from bot.quota.plan import QuotaConfig, Request, StreamView, Usage, plan_budget
from bot.quota.view import HOLD_SECONDS, LedgerView, MemoryLedger, Refused
from bot.state import connect
from tests.redis_cluster import WITH_CLUSTER, store_url


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


ROOT = Path(__file__).resolve().parent.parent
START = datetime(2025, 6, 2, 17, 0, tzinfo=UTC)
CONFIG = QuotaConfig(daily_units=2_000, reserved_sends=4, stream_hours=1.0)


@dataclass
class Clock:
    now: datetime = START

    def __call__(self) -> datetime:
        return self.now


class Twin:
    """``MemoryLedger`` behind the async face of ``QuotaLedger``, for one contract."""

    def __init__(self, clock: Clock) -> None:
        self.memory = MemoryLedger(CONFIG)
        self.clock = clock

    async def view(self, *, add_mentions: int = 0) -> LedgerView:
        return self.memory.view(self.clock())

    async def reserve(self, hold: str, request: Request) -> int:
        return self.memory.reserve(hold, request, self.clock())

    async def charge_insert(self, hold: str | None, cost: int) -> Usage:
        self.memory.charge_insert(hold, cost, self.clock())
        return self.memory.view(self.clock()).usage

    async def settle(self, hold: str | None, *, sent: bool) -> None:
        self.memory.settle(hold, sent=sent)

    async def charge(self, units: int, *, kind: str = "read") -> Usage:
        self.memory.charge(units, "lookup" if kind == "lookup" else "read")
        return self.memory.view(self.clock()).usage

    async def follow(self, started: datetime, reading: str) -> None:
        self.memory.stream = StreamView(started, "stream" if reading == "stream" else "poll")


Ledger = QuotaLedger | Twin


@pytest.fixture(params=["twin", "memory", "real"])
async def ledger(
    request: pytest.FixtureRequest, key_tag: str
) -> AsyncIterator[tuple[Ledger, Clock]]:
    """The twin, the scripts on the embedded store, the scripts on a real Redis server."""
    clock = Clock()
    if request.param == "twin":
        yield Twin(clock), clock
        return
    url = f"memory://quota-{key_tag}"
    if request.param == "real":
        url = request.getfixturevalue("redis_url_real")
    client = await connect.open_redis(url)
    try:
        yield QuotaLedger(client, CONFIG, project=f"{key_tag}.apps", clock=clock), clock
    finally:
        await client.aclose()


@pytest.fixture
def redis_url_real(real_redis_url: str, key_tag: str) -> Iterator[str]:
    yield real_redis_url
    cleanup = redis.Redis.from_url(real_redis_url)
    try:
        doomed = list(cleanup.scan_iter(match=f"*{key_tag}*", count=1000))
        if doomed:
            cleanup.delete(*doomed)
    finally:
        cleanup.close()


def _budget(view: LedgerView, clock: Clock) -> int:
    return plan_budget(CONFIG, view.usage, view.stream or StreamView(START), clock()).reply_limit


async def test_mentions_hold_what_fits_and_inserts_settle_their_hold(
    ledger: tuple[Ledger, Clock],
) -> None:
    book, clock = ledger
    await book.follow(START, "stream")
    limit = _budget(await book.view(), clock)
    mention = Request(want=100, minimum=50, limit=limit)
    assert await book.reserve("a", mention) == 100
    assert (await book.view()).usage == Usage(0, 0, 100)
    # the reply goes out in one piece: 50 move from the hold to the spend, 50 come back
    assert await book.charge_insert("a", 50) == Usage(50, 1, 50)
    await book.settle("a", sent=True)
    assert (await book.view()).usage == Usage(50, 1, 0, replies=1)
    # fill the budget to one piece short of a reply: a partial hold, then a refusal
    await book.charge(limit - 50 - 60, kind="read")
    assert await book.reserve("b", mention) == 60
    assert await book.reserve("c", mention) == 0
    view = await book.view()
    assert view.by_kind["reply"] == 50 and view.usage.held == 60


async def test_a_piece_without_a_hold_only_fits_within_the_reply_budget(
    ledger: tuple[Ledger, Clock],
) -> None:
    book, clock = ledger
    await book.follow(START, "stream")
    limit = _budget(await book.view(), clock)
    await book.charge(limit - 50, kind="read")
    await book.charge_insert(None, 50)  # exactly fits
    with pytest.raises(Refused) as refused:
        await book.charge_insert(None, 50)  # would eat into the reading reserve
    assert not refused.value.spent
    await book.charge(CONFIG.daily_units - limit - 10, kind="lookup")
    with pytest.raises(Refused) as spent:
        await book.charge_insert(None, 50)
    assert spent.value.spent
    assert (await book.view()).usage.units == CONFIG.daily_units - 10


async def test_a_held_piece_is_sent_even_when_the_budget_is_otherwise_gone(
    ledger: tuple[Ledger, Clock],
) -> None:
    book, clock = ledger
    await book.follow(START, "stream")
    limit = _budget(await book.view(), clock)
    assert await book.reserve("x", Request(100, 50, limit)) == 100
    await book.charge(limit - 100, kind="read")  # everything else went to reading meanwhile
    await book.charge_insert("x", 50)
    await book.charge_insert("x", 50)
    with pytest.raises(Refused):
        await book.charge_insert("x", 50)  # a third piece was never held
    assert (await book.view()).usage == Usage(limit, 2, 0)


async def test_unprompted_turns_are_paced_and_holds_lapse(ledger: tuple[Ledger, Clock]) -> None:
    book, clock = ledger
    room = Request(want=100, minimum=50, limit=1_000, gap=300.0)
    assert await book.reserve("r1", room) == 100
    clock.now += timedelta(seconds=299)
    assert await book.reserve("r2", room) == 0  # paced: not yet
    clock.now += timedelta(seconds=1)
    assert await book.reserve("r2", room) == 100
    assert (await book.view()).unprompted_at == pytest.approx(clock.now.timestamp())
    assert (await book.view()).usage.held == 200
    clock.now += timedelta(seconds=HOLD_SECONDS + 1)  # never settled: the turns died
    assert (await book.view()).usage.held == 0
    assert await book.reserve("m", Request(100, 50, 1_000)) == 100  # a mention is not paced


@pytest.mark.redis
async def test_the_view_counts_mentions_and_the_chat_read(
    redis_client: Redis, key_tag: str
) -> None:
    clock = Clock()
    book = QuotaLedger(redis_client, CONFIG, project=f"{key_tag}.apps", clock=clock)
    await book.follow(START - timedelta(minutes=5), "poll")
    await book.view(add_mentions=3)
    view = await book.view(add_mentions=2)
    assert view.stream == StreamView(START - timedelta(minutes=5), "poll", 5, START)
    await book.follow(START - timedelta(minutes=5), "stream")  # the same chat, read otherwise
    view = await book.view()
    assert view.stream is not None and (view.stream.reading, view.stream.mentions) == ("stream", 5)
    await book.follow(START, "stream")  # a new chat: counting starts over
    assert (await book.view()).stream == StreamView(START, "stream", 0, START)


_WORKER = """
import asyncio, json, sys
from datetime import datetime, UTC
from bot.quota.ledger import QuotaLedger
from bot.quota.plan import QuotaConfig, Request
from bot.state import connect

async def main(url, project, name):
    redis = await connect.open_redis(url)
    book = QuotaLedger(redis, QuotaConfig(daily_units=50_000), project=project,
                       clock=lambda: datetime(2025, 6, 2, 17, 0, tzinfo=UTC))
    while not await redis.exists(f"go-{project}"):  # both start together
        await asyncio.sleep(0.005)
    granted, n = [], 0
    while True:
        n += 1
        got = await book.reserve(f"{name}-{n}", Request(want=100, minimum=50, limit=30_050))
        if not got:
            break
        granted.append(got)
    await redis.aclose()
    print(json.dumps(granted))

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.e2e
async def test_two_processes_never_hold_more_than_the_budget(
    real_redis: Redis, real_redis_url: str, key_tag: str
) -> None:
    """Two worker processes reserve mention holds as fast as they can against one project, from
    the same moment: together they hold exactly what the limit allows, never a unit more (the
    last hold is the partial 50 that still fits)."""
    project = f"{key_tag}.apps"
    procs = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            _WORKER,
            real_redis_url,
            project,
            name,
            stdout=asyncio.subprocess.PIPE,
            cwd=ROOT,
            env={"PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        for name in ("w1", "w2")
    ]
    await asyncio.sleep(0.5)  # let both connect (a head start would still be correct)
    await real_redis.set(f"go-{project}", 1, ex=60)
    outputs = [await asyncio.wait_for(p.communicate(), 60) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    grants = [json.loads(out) for out, _ in outputs]
    assert sum(map(sum, grants)) == 30_050
    assert sorted(g for gs in grants for g in gs).count(50) == 1
    book = QuotaLedger(real_redis, CONFIG, project=project, clock=Clock())
    assert (await book.view()).usage.held == 30_050
