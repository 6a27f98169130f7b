"""The store's client library, named in one place: redis-py's asyncio client, its pipeline, the
errors Chorus handles and the argument type its commands take.

Every module of the state layer (``bot.state``, ``bot.bus``, ``bot.ops``) takes these names from
here rather than from ``redis``: the layer speaks Redis commands, but which package carries them
and where that package keeps its classes is one module's business, so a client upgrade that
moves a class changes this file only. Connecting (the URL, retries, the embedded store) is
``bot.state.connect``'s.
"""

from __future__ import annotations

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
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
]
