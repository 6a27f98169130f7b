"""Stored embedding vectors: for each collection of short texts (a user's notes, a conversation's
summaries and notes), one hash of text id -> quantised vector, with the collection's TTL.

The ids and the vectors are ``bot.memory.vectors``' (which text, which model, how quantised);
this module keeps them. A collection is written off the reply path only (embedding is a network
call); the reply path reads it inside the turn's one read (``bot.state.turn.TurnQuery``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from bot.state.client import Redis


class VectorStore:
    """Collections of vectors, each a hash at its own key."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def ids(self, key: str) -> set[str]:
        """The text ids the collection holds a vector of."""
        found = await self.redis.hkeys(key)
        return {k.decode() if isinstance(k, bytes) else str(k) for k in found}

    async def update(
        self,
        key: str,
        add: Mapping[str, str],
        remove: Collection[str] = (),
        *,
        ttl_seconds: int | None = None,
    ) -> None:
        """Add vectors, drop others and (``ttl_seconds``) restart the collection's TTL, in one
        transaction."""
        async with self.redis.pipeline(transaction=True) as pipe:
            if add:
                mapping: dict[Any, Any] = dict(add)  # (redis-py's mapping type is invariant)
                pipe.hset(key, mapping=mapping)
            if remove:
                pipe.hdel(key, *remove)
            if ttl_seconds is not None:
                pipe.expire(key, ttl_seconds)
            await pipe.execute()
