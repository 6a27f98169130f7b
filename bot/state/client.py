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
    "ResponseError",
    "StoreConnectionError",
    "StoreError",
    "StoreTimeoutError",
    "WatchError",
    "is_cluster",
    "slot_of",
]


def is_cluster(client: object) -> bool:
    """Whether ``client`` is a Redis Cluster client (``redis+cluster://``): its pipelines are
    split by node and a transaction or script must stay within one hash slot."""
    return isinstance(client, RedisCluster)


def slot_of(key: str) -> int:
    """The Redis Cluster hash slot of ``key`` (its ``{hash tag}`` when it has one)."""
    return key_slot(key.encode())
