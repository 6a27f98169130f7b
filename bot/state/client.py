"""The store's client library, named in one place: redis-py's asyncio client, its pipeline, the
errors Chorus handles and the argument type its commands take.

Every module of the state layer (``bot.state``, ``bot.bus``, ``bot.ops``) takes these names from
here rather than from ``redis``: the layer speaks Redis commands, but which package carries them
and where that package keeps its classes is one module's business, so a client upgrade that
moves a class changes this file only. Connecting (the URL, retries, the embedded store) is
``bot.state.connect``'s. A Redis Cluster's client (``RedisCluster``) speaks the same commands
and is handed around under the same name; ``is_cluster`` tells the few places that send a
transaction or script over several slots (they split it by slot there).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.client import Pipeline
from redis.crc import key_slot
from redis.exceptions import ConnectionError as StoreConnectionError
from redis.exceptions import ExecAbortError, ResponseError, WatchError
from redis.exceptions import RedisError as StoreError
from redis.exceptions import TimeoutError as StoreTimeoutError
from redis.typing import EncodableT

__all__ = [
    "EncodableT",
    "ExecAbortError",
    "Pipeline",
    "Redis",
    "RedisCluster",
    "ResponseError",
    "StoreConnectionError",
    "StoreError",
    "StoreTimeoutError",
    "WatchError",
    "WATCH_TRIES",
    "delete_if_holds",
    "KeptChanging",
    "is_cluster",
    "read_on_slot",
    "slot_of",
    "unraced",
    "watched",
]

T = TypeVar("T")
# How often an optimistic transaction is tried while the keys it watched keep changing: enough
# for a few writers racing on one key; past it something writes that key in a loop.
WATCH_TRIES = 8


class KeptChanging(RuntimeError):
    """An optimistic transaction lost its race ``WATCH_TRIES`` times in a row."""


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a Redis Cluster client (``redis+cluster://``): its pipelines are
    split by node and a transaction or script must stay within one hash slot."""
    return isinstance(client, RedisCluster)


def slot_of(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (its ``{hash tag}`` when it has one)."""
    return key_slot(key.encode())


async def read_on_slot(
    client: RedisCluster, group: str, consumer: str, streams: dict[str, str], count: int, block: int
) -> Any:
    """``XREADGROUP`` of ``streams`` (one slot's) on a cluster, sent straight to the node that
    serves their slot: redis-py finds the keys of a command whose keys move (``XREADGROUP``)
    by asking the server (``COMMAND GETKEYS``), a round trip per read that naming the node
    saves. The reply is parsed as ``xreadgroup``'s."""
    node = client.get_node_from_key(next(iter(streams)))
    pieces: list[EncodableT] = ["XREADGROUP", "GROUP", group, consumer, "COUNT", count]
    pieces += ["BLOCK", block, "STREAMS", *streams.keys(), *streams.values()]
    return await client.execute_command(*pieces, target_nodes=node)


async def unraced(attempt: Callable[[], Awaitable[T]], what: str) -> T:
    """``attempt()`` again while a key it watched changed before its ``EXEC`` (``WatchError``:
    it read a value that is gone, so it reads again), at most ``WATCH_TRIES`` times; past that
    ``KeptChanging``, saying that ``what`` kept changing."""
    for _ in range(WATCH_TRIES):
        try:
            return await attempt()
        except WatchError:
            continue
    raise KeptChanging(f"{what} kept changing; gave up after {WATCH_TRIES} tries")


async def watched(client: Redis, step: Callable[[Pipeline], Awaitable[T]], what: str) -> T:
    """``step`` on one transaction pipeline of ``client`` (``WATCH``, reads, ``MULTI``, the
    writes, ``EXEC``), tried as ``unraced`` tries it."""
    async with client.pipeline(transaction=True) as pipe:
        return await unraced(lambda: step(pipe), what)


async def delete_if_holds(client: Redis, key: str, value: str) -> bool:
    """Delete ``key`` if it still holds ``value`` (a lease or an alias let go only by its
    holder), checked and deleted in one watched transaction; whether it was deleted."""

    async def delete(pipe: Pipeline) -> bool:
        await pipe.watch(key)
        if await pipe.get(key) != value:
            await pipe.unwatch()  # type: ignore[no-untyped-call]
            return False
        pipe.multi()  # type: ignore[no-untyped-call]
        pipe.delete(key)
        await pipe.execute()
        return True

    return await watched(client, delete, key)
