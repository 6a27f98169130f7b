"""Slash-command interactions held by gateway processes, and their answers routed to the holder.

Why: with the shards spread over several gateway processes, the answer to a slash command can
be read off the bus by a process that did not receive the interaction. Only the receiving
process can answer it privately: it deferred the interaction ephemerally and waits for the
answer; any other process would post it as an ordinary channel message, in public.

How (the answer is *routed to the holder*, not sent by whoever reads it):

- The receiving process marks the interaction (``hold``) with its own id (``holder``, one per
  process) before it publishes the command, so the mark exists before any answer can.
- A process that reads an answer held by another process forwards it (``forward``): the
  ``Reply`` goes onto the holder's inbox list (with a TTL) in one transaction that also reads
  the holder's liveness mark. The reader acks the bus entry only after that, so a reader killed
  between read and forward loses nothing: the bus hands the unacked entry out again.
- The holder reads its inbox (``receive``: ``BLPOP`` with a timeout, renewing its liveness mark
  on each round), resolves the waiting command and sends the follow-up itself.
- Once the command is answered (or given up), ``release`` keeps the mark with no holder
  (``ANSWERED``) for as long again: an answer handed out again by the bus, or one that comes
  too late, is still known to be private and is dropped, never posted.
- A holder that died stops renewing its liveness mark (``ALIVE_SECONDS``); an answer forwarded
  after that is reported as not delivered (the reader logs the drop) and lapses with the inbox.

Why not the other way (any process answers through the interaction's webhook): that needs the
interaction token, a credential valid for 15 minutes, copied into the shared store for every
command, and the holder would then have to learn from the store whether someone else answered
before saying none came. Routing keeps the token in the one process that received it, and the
holder stays the only sender of the follow-up, which is what makes it exactly one.

Written only when this process holds a subset of the shards (``adapters/discord/shards.py``):
one process, or one holding every shard, makes none of these round trips.
"""

from __future__ import annotations

import uuid

from bot.state import keys, keys_interactions
from bot.state.client import Redis

ANSWERED = "-"  # the mark's value once its command is answered or given up
ALIVE_SECONDS = 15.0  # a holder's liveness mark lapses this long after its last inbox round


def _ms(seconds: float) -> int:
    return max(1, round(seconds * 1000))


class PendingInteractions:
    """The interactions of one platform held by the gateway processes, seen from one of them."""

    def __init__(self, redis: Redis, platform: str = "discord", holder: str = "") -> None:
        self._redis = redis
        self._platform = platform
        self.holder = holder or uuid.uuid4().hex  # this process, in the marks it sets
        self._inbox = keys_interactions.interaction_inbox(platform, self.holder)
        self._alive = keys_interactions.gateway_alive(platform, self.holder)

    def _mark(self, interaction_id: str) -> str:
        return keys.pending_interaction(self._platform, interaction_id)

    async def hold(self, interaction_id: str, ttl: float) -> None:
        """This process waits for the answer to ``interaction_id`` (for ``ttl`` seconds at most)."""
        await self._redis.set(self._mark(interaction_id), self.holder, px=_ms(ttl))

    async def release(self, interaction_id: str, ttl: float) -> None:
        """Answered or given up: the mark stays, with no holder, ``ttl`` seconds more (an
        answer later than that would be taken for an ordinary one)."""
        await self._redis.set(self._mark(interaction_id), ANSWERED, xx=True, px=_ms(ttl))

    async def holder_of(self, reply_to_id: str) -> str | None:
        """The process holding the interaction ``reply_to_id`` (``ANSWERED`` once it is done);
        None when no process holds one with that id (an ordinary message's answer)."""
        found = await self._redis.get(self._mark(reply_to_id))
        return None if found is None else str(found)

    async def held(self, reply_to_id: str) -> bool:
        """Some process holds (or held) an interaction with this id: its answer is private."""
        return await self.holder_of(reply_to_id) is not None

    async def forward(self, holder: str, payload: str, ttl: float) -> bool:
        """Put an answer on ``holder``'s inbox (kept ``ttl`` seconds); True when the holder is
        alive (it read its inbox within ``ALIVE_SECONDS``), False when it is gone."""
        inbox = keys_interactions.interaction_inbox(self._platform, holder)
        alive = keys_interactions.gateway_alive(self._platform, holder)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.exists(alive)
            pipe.rpush(inbox, payload)
            pipe.pexpire(inbox, _ms(ttl))
            found = await pipe.execute()
        return bool(found[0])

    async def receive(self, wait: float) -> str | None:
        """Renew this process's liveness mark, then wait up to ``wait`` seconds for an answer
        another process forwarded here (``wait``: well under ``ALIVE_SECONDS`` and under the
        client's read timeout, which ``BLPOP`` must not outlast)."""
        await self._redis.set(self._alive, "1", px=_ms(ALIVE_SECONDS))
        found = await self._redis.blpop([self._inbox], timeout=wait)
        return None if found is None else str(found[1])

    async def leave(self) -> None:
        """This process stops reading its inbox: answers forwarded from now on are reported as
        not delivered at once, not after the liveness mark lapses."""
        await self._redis.delete(self._alive)
