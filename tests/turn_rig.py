"""The turn stores under one contract: a ``turn_store`` fixture and the helpers its tests share.

``turn_store`` runs a test three times: on the in-memory twin (``MemoryTurnStore``, ``twin``),
and on ``RedisTurnStore`` over the embedded store (``memory``), a real Redis (``real``) and a
real Redis Cluster of three primaries (``cluster``, ``tests/redis_cluster.py``). The
helpers read and change a store the way a test needs to and a turn never does: a claim's value,
its lease lapsing (what expiry, or a Redis restart that lost the key, does).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime

import pytest
import redis
from redis.asyncio import Redis

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.events import ChatMessage, ConversationKey
from bot.llm.scripted import ScriptedProvider
from bot.memory.buffers import MemoryStore
from bot.memory.insight_queue import InsightJob, due
from bot.memory.recall import Pending, Recall
from bot.memory.summaries import ChannelMemory, SummaryPlan, from_read
from bot.router.read import Read, TurnRead
from bot.router.scoping import Profile
from bot.state import connect, keys
from bot.state.claims import Claim, Claims
from bot.state.engagement import RedisLiveStore
from bot.state.history import HistoryEntry, HistoryStore
from bot.state.insight_jobs import DEFAULT_QUEUE
from bot.state.memory_turn import MemoryTurnStore
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import HistoryAppend, TurnChanges, TurnQuery, TurnState

Store = MemoryTurnStore | RedisTurnStore
WINDOW = 40


@pytest.fixture(
    params=[
        pytest.param("twin", id="twin"),
        pytest.param("memory", id="memory", marks=pytest.mark.redis),
        pytest.param("real", id="real", marks=pytest.mark.redis),
        pytest.param("cluster", id="cluster", marks=[pytest.mark.redis, pytest.mark.e2e]),
    ]
)
async def turn_store(request: pytest.FixtureRequest, key_tag: str) -> AsyncIterator[Store]:
    """A turn store: the twin, or Redis (embedded, then real; keys with ``key_tag`` go after)."""
    if request.param == "twin":
        yield MemoryTurnStore(max_messages=WINDOW, keep=20, probe=5)
        return
    url = f"memory://test-{key_tag}"
    if request.param == "real":
        url = request.getfixturevalue("redis_url_real_only")
    if request.param == "cluster":  # three primaries, keys in the cluster layout meanwhile
        url = request.getfixturevalue("redis_cluster_url")
    client = await connect.open_redis(url)
    history = HistoryStore(client, max_messages=WINDOW, ttl_seconds=3600, keep=20, probe=5)
    try:
        yield RedisTurnStore(client, history=history, channels=RedisLiveStore(client))
    finally:
        await client.aclose()
        keys.use_cluster_layout(False)


@pytest.fixture
def redis_url_real_only(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The real server's URL; afterwards every key carrying ``key_tag`` is deleted."""
    url: str = request.getfixturevalue("real_redis_url")
    yield url
    client = redis.Redis.from_url(url)
    try:
        doomed = list(client.scan_iter(match=f"*{key_tag}*", count=1000))
        if doomed:
            client.delete(*doomed)
    finally:
        client.close()


def conversation(key_tag: str, name: str = "replies") -> ConversationKey:
    return ConversationKey(platform="slack", channel=f"{name}-{key_tag}")


async def take(store: Store, claim: Claim) -> bool | None:
    """Take ``claim`` as a turn's read does; ``Claim.taken`` of what it found."""
    conv = ConversationKey(platform="slack", channel="claims")  # (nothing is written there)
    state = await store.read(TurnQuery(conv, "slack", "u1", claim=claim.take))
    return claim.taken(state.claimed)


async def lapse(store: Store, key: str) -> None:
    """The claim's lease runs out (or the store lost the key)."""
    if isinstance(store, MemoryTurnStore):
        store.claims.pop(key, None)
    else:
        await store.redis.delete(key)


async def value(store: Store, key: str) -> object:
    """What a claim's key holds now (None: nothing)."""
    if isinstance(store, MemoryTurnStore):
        held = store.claims.get(key)
        return None if held is None else held[0]
    return await store.redis.get(key)


def reply(conv: ConversationKey, worker: str) -> TurnChanges:
    """A commit's side effect the tests can count: a line naming the worker who wrote it."""
    entry = HistoryEntry(role="assistant", text=worker)
    return TurnChanges(history=HistoryAppend(conv, (entry,)))


async def replies(store: Store, conv: ConversationKey) -> list[str]:
    """The workers whose ``reply`` was committed, in order."""
    state = await store.read(TurnQuery(conv, "slack", "u1"))
    return [entry.text for entry in state.history]


def redis_of(store: Store) -> Redis:
    assert isinstance(store, RedisTurnStore)
    return store.redis


async def read_memory(redis: Redis, platform: str, user_id: str, refresh: int = 0) -> TurnState:
    """The author's memory as the reply path's read fetches it (through ``/link``; with
    ``refresh``, a link is kept alive that long), in one round trip."""
    store = RedisTurnStore(redis, history=HistoryStore(redis, max_messages=1, ttl_seconds=60))
    conv = ConversationKey(platform=platform, channel="memory-read")  # (nothing is written)
    return await store.read(TurnQuery(conv, platform, user_id, memory_refresh=refresh))


async def read_turn(
    redis: Redis,
    history: HistoryStore,
    memory: MemoryStore | None,
    message: ChatMessage,
    recall: Recall | None = None,
    summaries: SummaryPlan | None = None,
) -> TurnRead:
    """The router's read stage for ``message`` (no claim), on a scope that keeps memory (and,
    with ``summaries``, summaries)."""
    store = RedisTurnStore(redis, history=history)
    read = Read(store, Claims(store), memory=memory, recall=recall)
    assembler = PromptAssembler(model="m", system_prompt="S")
    profile = Profile("test", assembler, Agent(ScriptedProvider()), summaries=summaries)
    found = await read(message, None, profile)
    assert found is not None
    return found


async def read_recall(redis: Redis, pending: Pending) -> TurnState:
    """What a turn's read fetches for ``pending`` recall (vectors, the knowledge version)."""
    store = RedisTurnStore(redis, history=HistoryStore(redis, max_messages=1, ttl_seconds=60))
    message = pending.message
    query = TurnQuery(
        message.conversation,
        message.platform,
        message.author.id,
        user_vectors=pending.vectors,
        knowledge_base=pending.base,
    )
    return await store.read(query)


async def read_summaries(
    redis: Redis, conv: ConversationKey, plan: SummaryPlan, *, vectors: bool = False
) -> ChannelMemory:
    """A conversation's summaries and notes (and their vectors) as a turn's read finds them."""
    store = RedisTurnStore(redis, history=HistoryStore(redis, max_messages=1, ttl_seconds=60))
    query = TurnQuery(
        conv,
        conv.platform,
        "u1",
        summaries=True,
        community=plan.community,
        summary_vectors=vectors,
    )
    return from_read(await store.read(query), conv, plan, vectors=vectors)


async def enqueue(
    redis: Redis,
    job: InsightJob,
    *,
    debounce: float,
    max_delay: float,
    now: datetime | None = None,
    queue: str = DEFAULT_QUEUE,
) -> None:
    """An analysis asked for as a turn's commit asks for it, written now."""
    change = due(job, debounce=debounce, max_delay=max_delay, now=now, queue=queue)
    await RedisTurnStore(redis).write(TurnChanges(insight=change))
