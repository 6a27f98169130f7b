"""Slash-command interactions held by a gateway process, marked in the store for the others.

Why: with the shards spread over several gateway processes, the answer to a slash command can be
read off the bus by a process that did not receive the interaction. Only the receiving process
can answer it (privately, through the interaction's token); any other would post the answer as
an ordinary channel message, in public, though the command asked for a private answer. So the
receiving process marks the interaction here while it waits, and a process that reads an answer
it holds no interaction for asks first: an answer to an interaction held elsewhere is dropped,
never posted (its holder then says it got no answer in time). The mark lapses by itself.
"""

from __future__ import annotations

from bot.state import keys
from bot.state.client import Redis


class PendingInteractions:
    """The interactions of one platform held, right now, by some gateway process."""

    def __init__(self, redis: Redis, platform: str = "discord") -> None:
        self._redis = redis
        self._platform = platform

    async def hold(self, interaction_id: str, ttl: float) -> None:
        key = keys.pending_interaction(self._platform, interaction_id)
        await self._redis.set(key, "1", px=max(1, round(ttl * 1000)))

    async def release(self, interaction_id: str) -> None:
        await self._redis.delete(keys.pending_interaction(self._platform, interaction_id))

    async def held(self, reply_to_id: str) -> bool:
        """Some process holds an interaction with this id (so its answer is private)."""
        key = keys.pending_interaction(self._platform, reply_to_id)
        return bool(await self._redis.exists(key))
