"""The insights queue on both backends: debounce, max delay, one job per user, leases,
completion with late turns, rescheduling and cancellation. Time is injected, never slept."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from itertools import count
from pathlib import Path

import pytest
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.memory.insight_queue import InsightJob
from bot.state import keys
from bot.state.insight_jobs import JOB_TTL_SECONDS, JobQueue, queue_cancel
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.turn_rig import enqueue


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
DEBOUNCE = 20.0
MAX_DELAY = 120.0


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.fixture
def tokens() -> Iterator[str]:
    return (f"token{n}" for n in count())


@pytest.fixture
def queue(redis_client: Redis, tokens: Iterator[str], key_tag: str) -> JobQueue:
    # Each test has its own queue, so tests sharing a real server never see each other's jobs.
    return JobQueue(redis_client, max_delay=MAX_DELAY, token=lambda: next(tokens), queue=key_tag)


class Turns:
    def __init__(self, redis: Redis, tag: str) -> None:
        self.redis = redis
        self.tag = tag
        self.n = 0

    def conv(self, name: str = "general") -> ConversationKey:
        return ConversationKey(platform="discord", channel=f"{name}-{self.tag}")

    async def turn(
        self, seconds: float, *, user: str = "ada", conv: ConversationKey | None = None
    ) -> None:
        self.n += 1
        job = InsightJob(
            platform="discord",
            user_id=f"{user}-{self.tag}",
            display_name=user.title(),
            conversation=conv or self.conv(),
            message_id=f"m{self.n}",
            at=at(seconds),
        )
        await enqueue(
            self.redis, job, debounce=DEBOUNCE, max_delay=MAX_DELAY, now=at(seconds), queue=self.tag
        )


@pytest.fixture
def turns(redis_client: Redis, key_tag: str) -> Turns:
    return Turns(redis_client, key_tag)


async def test_enqueue_is_write_only_and_sets_a_ttl(
    turns: Turns, redis_client: Redis, key_tag: str
) -> None:
    await turns.turn(0)
    key = keys.insights_job("discord", f"ada-{key_tag}", key_tag)
    assert JOB_TTL_SECONDS - 60 < await redis_client.ttl(key) <= JOB_TTL_SECONDS


async def test_a_burst_of_turns_becomes_one_job_after_the_debounce(
    turns: Turns, queue: JobQueue, key_tag: str
) -> None:
    for seconds in (0, 5, 10):
        await turns.turn(seconds)
    assert await queue.claim_due(at(29), 10) == [], "10s after the last turn is too early"
    [job] = await queue.claim_due(at(30), 10)
    assert (job.platform, job.user_id, job.display_name) == ("discord", f"ada-{key_tag}", "Ada")
    assert job.rev == 3 and job.attempts == 0
    assert [(conv, ref.message_id) for conv, ref in job.conversations] == [(turns.conv(), "m3")]
    assert await queue.complete(job, at(31)) is True
    assert await queue.claim_due(at(10_000), 10) == []
    assert await queue.next_due() is None


async def test_a_never_ending_burst_is_analysed_by_the_max_delay(
    turns: Turns, queue: JobQueue
) -> None:
    seconds = 0
    while seconds < MAX_DELAY:
        await turns.turn(seconds)
        assert await queue.claim_due(at(seconds), 10) == []
        seconds += 10
    await turns.turn(seconds)  # t=120: the debounce alone would wait until 140
    [job] = await queue.claim_due(at(MAX_DELAY), 10)
    assert job.rev == 13


async def test_one_job_per_user_covering_each_conversation(
    turns: Turns, queue: JobQueue, key_tag: str
) -> None:
    await turns.turn(0, conv=turns.conv("a"))
    await turns.turn(1, conv=turns.conv("b"))
    await turns.turn(2, conv=turns.conv("a"))
    await turns.turn(3, user="bob")
    jobs = await queue.claim_due(at(100), 10)
    by_user = {job.user_id: job for job in jobs}
    assert set(by_user) == {f"ada-{key_tag}", f"bob-{key_tag}"}
    ada = by_user[f"ada-{key_tag}"]
    assert [(c.channel, r.message_id) for c, r in ada.conversations] == [
        (f"a-{key_tag}", "m3"),
        (f"b-{key_tag}", "m2"),
    ]


async def test_two_workers_never_claim_the_same_job(
    turns: Turns, redis_client: Redis, tokens: Iterator[str]
) -> None:
    await turns.turn(0)
    await turns.turn(1, user="bob")
    workers = [
        JobQueue(redis_client, max_delay=MAX_DELAY, token=lambda: next(tokens), queue=turns.tag)
        for _ in range(4)
    ]
    claims = await asyncio.gather(*(w.claim_due(at(100), 10) for w in workers))
    claimed = [job.user_id for jobs in claims for job in jobs]
    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 2
    again = await asyncio.gather(*(w.claim_due(at(100), 10) for w in workers))
    assert all(jobs == [] for jobs in again), "leased users are skipped while analysed"


async def test_a_crashed_workers_job_returns_when_its_lease_expires(
    turns: Turns, queue: JobQueue, redis_client: Redis, key_tag: str
) -> None:
    await turns.turn(0)
    [job] = await queue.claim_due(at(30), 10)
    lease = keys.insights_lease("discord", f"ada-{key_tag}", key_tag)
    assert 0 < await redis_client.pttl(lease) <= queue.lease_seconds * 1000
    assert await queue.claim_due(at(31), 10) == []
    await redis_client.delete(lease)  # what PX expiry does when the worker died
    [again] = await queue.claim_due(at(32), 10)
    assert again.user_id == job.user_id and again.rev == job.rev


async def test_turns_during_an_analysis_keep_the_job_pending(turns: Turns, queue: JobQueue) -> None:
    await turns.turn(0)
    [job] = await queue.claim_due(at(30), 10)
    await turns.turn(35)  # arrives while the worker is busy
    assert await queue.complete(job, at(40)) is False
    assert await queue.claim_due(at(54), 10) == [], "the new turn has its own debounce"
    [later] = await queue.claim_due(at(55), 10)
    assert later.rev == 2


async def test_a_job_with_new_turns_gets_a_fresh_deadline(turns: Turns, queue: JobQueue) -> None:
    await turns.turn(0)
    [job] = await queue.claim_due(at(20), 10)
    for seconds in range(30, 200, 10):  # a burst that starts during the analysis
        await turns.turn(seconds)
        if seconds == 30:
            assert await queue.complete(job, at(30)) is False
        if seconds < 150:
            assert await queue.claim_due(at(seconds), 10) == [], seconds
    assert len(await queue.claim_due(at(150), 10)) == 1  # 30 + MAX_DELAY


async def test_retry_later_reschedules_and_counts_attempts(
    turns: Turns, queue: JobQueue, redis_client: Redis, key_tag: str
) -> None:
    await turns.turn(0)
    [job] = await queue.claim_due(at(30), 10)
    await queue.retry_later(job, at(30), delay=60)
    assert not await redis_client.exists(keys.insights_lease("discord", f"ada-{key_tag}", key_tag))
    assert await queue.claim_due(at(89), 10) == []
    assert await queue.next_due() == at(90)
    [again] = await queue.claim_due(at(90), 10)
    assert again.attempts == 1 and again.rev == job.rev


async def test_cancel_removes_a_pending_job(
    turns: Turns, queue: JobQueue, redis_client: Redis, key_tag: str
) -> None:
    await turns.turn(0)
    async with redis_client.pipeline(transaction=True) as pipe:
        queue_cancel(pipe, "discord", f"ada-{key_tag}", queue=key_tag)
        await pipe.execute()
    assert await queue.claim_due(at(1000), 10) == []
    assert await queue.next_due() is None


async def test_a_job_cancelled_while_analysed_is_not_rescheduled(
    turns: Turns, queue: JobQueue, redis_client: Redis, key_tag: str
) -> None:
    await turns.turn(0)
    [job] = await queue.claim_due(at(30), 10)
    async with redis_client.pipeline(transaction=True) as pipe:
        queue_cancel(pipe, "discord", f"ada-{key_tag}", queue=key_tag)
        await pipe.execute()
    await queue.retry_later(job, at(30), delay=60)
    assert await queue.next_due() is None
    assert await queue.complete(job, at(31)) is True


async def test_leftovers_of_an_expired_job_are_cleaned(
    turns: Turns, queue: JobQueue, redis_client: Redis, key_tag: str
) -> None:
    await turns.turn(0)
    await redis_client.delete(keys.insights_job("discord", f"ada-{key_tag}", key_tag))  # TTL passed
    assert await queue.claim_due(at(30), 10) == []
    assert await queue.next_due() is None
    assert not await redis_client.exists(keys.insights_lease("discord", f"ada-{key_tag}", key_tag))


def test_job_ids_round_trip() -> None:
    for user in ["U123", "a:b", "100%", "%3A"]:
        member = keys.insights_member("slack", user)
        assert ":" not in member.partition(":")[2]
        assert keys.parse_insights_member(member) == ("slack", user)
    with pytest.raises(ValueError):
        keys.parse_insights_member("nocolon")


@pytest.mark.e2e
def test_the_core_enqueues_without_importing_the_insights_package() -> None:
    """Dependency rule: ``bot`` never imports ``insights`` (only the composition root may)."""
    code = (
        "import sys, bot.memory.buffers, bot.memory.edit, bot.memory.enrichment, bot.memory.relevance, "
        "bot.router.memory_commands, bot.memory.insight_queue; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'insights'); "
        "assert not bad, bad"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
