"""What the gateway processes sharing one EventSub conduit keep in the state store: the conduit's
id, who holds which shard (a lease per shard), who is alive, and the channels joined at run time.

Twitch's conduits (``TWITCH_TRANSPORT=conduit``) separate the subscriptions from the transports:
a conduit has N shards, each a WebSocket of some process, and Twitch hands every notification to
one enabled shard. Several gateway processes share one conduit, so who holds a shard lives here:

- **The conduit** (``keys.conduit``): ``SET NX``; the first process's conduit id wins and every
  other process adopts it (two processes starting at once never create two conduits in use).
- **A shard's lease** (``keys.conduit_shard``): the holder's token, ``SET NX PX``; renewed while
  held (``GUARDED``: only while the key still holds our token), released on a clean stop. A
  process killed stops renewing; its leases lapse and the shards are free for the others.
- **The members** (``keys.conduit_members``): a sorted set of the live processes' tokens scored
  by the end of their lease (epoch ms); ``live`` drops lapsed ones. It gives the fair share
  (``ceil(shards / live members)``), so a process that joins gets shards handed over.
- **The size** (``keys_conduits.conduit_size``): the conduit's shard count as the gateways use
  it, written by the process that found, created or resized the conduit at its start, read by
  every process each tick, so a resize (``TWITCH_CONDUIT_SHARDS`` changed, one gateway
  restarted) reaches the processes already running; no TTL.
- **Joined and left channels** (``keys.joined_channels``): two sets; the channels read are
  ``TWITCH_CHANNELS`` plus ``in`` minus ``out``, so ``chorus twitch join NAME`` and the
  dashboard change them without a restart; a counter of joins and leaves tells the gateways
  that something was asked even when the sets stay the same (a refused channel joined again).

``RedisConduitStore`` runs on Redis (or the embedded store, which speaks the same commands) and
``MemoryConduitStore`` is its in-memory twin; tests/test_conduit_store.py holds both to one
contract. The adapter's use of it: adapters/twitch/conduit.py.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol, cast

from bot.state import keys, keys_conduits
from bot.state.connect import Client
from bot.state.guarded import GUARDED

Clock = Callable[[], float]


def _ms(seconds: float) -> int:
    if seconds <= 0:
        raise ValueError(f"a lease must be positive, got {seconds}")
    return max(1, round(seconds * 1000))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class ConduitStore(Protocol):
    """The seam: what ``adapters/twitch/conduit.py`` and ``chorus twitch`` need."""

    async def conduit(self, app: str) -> str | None: ...

    async def adopt_conduit(self, app: str, conduit_id: str) -> str:
        """Record ``conduit_id`` unless one is recorded; the recorded one (the winner)."""
        ...

    async def replace_conduit(self, app: str, old: str | None, new: str) -> str: ...

    async def claim(self, conduit_id: str, shard: int, owner: str, lease: float) -> bool: ...

    async def renew(self, conduit_id: str, shard: int, owner: str, lease: float) -> bool: ...

    async def release(self, conduit_id: str, shard: int, owner: str) -> bool: ...

    async def owners(self, conduit_id: str, count: int) -> dict[int, str]: ...

    async def heartbeat(self, conduit_id: str, owner: str, lease: float) -> list[str]:
        """Mark ``owner`` alive for ``lease``; every live member (``owner`` among them)."""
        ...

    async def size(self, conduit_id: str) -> int | None:
        """The conduit's shard count as the gateways use it (None: not recorded)."""
        ...

    async def set_size(self, conduit_id: str, count: int) -> None: ...

    async def leave_members(self, conduit_id: str, owner: str) -> None: ...

    async def join_channel(self, app: str, channel: str) -> None: ...

    async def leave_channel(self, app: str, channel: str) -> None: ...

    async def channel_changes(self, app: str) -> tuple[set[str], set[str], int]:
        """The channels joined and the channels left at run time, and how many joins and leaves
        there were (a join of a channel already joined changes only that count)."""
        ...


def channels_now(configured: tuple[str, ...], joined: set[str], left: set[str]) -> list[str]:
    """The channels read: the configured ones plus the joined, minus the left, in that order."""
    wanted = dict.fromkeys([*configured, *sorted(joined)])
    return [c for c in wanted if c not in left]


def normal_channel(name: str) -> str:
    """A channel as ``TWITCH_CHANNELS`` spells it: lower case, no ``#``; ``ValueError`` if empty."""
    channel = name.strip().lstrip("#").lower()
    if not channel or not all(c.isalnum() or c == "_" for c in channel) or len(channel) > 25:
        raise ValueError(
            f"{name!r} is not a Twitch channel: its login (letters, digits, underscore; at most "
            "25) as in twitch.tv/<login>, or its numeric user id"
        )
    return channel


class RedisConduitStore:
    """``ConduitStore`` on Redis (or the embedded store)."""

    platform = "twitch"

    def __init__(self, redis: Client, *, clock: Clock = time.time) -> None:
        self.redis = redis
        self.clock = clock

    async def conduit(self, app: str) -> str | None:
        raw = await self.redis.get(keys.conduit(self.platform, app))
        return None if raw is None else _text(raw)

    async def adopt_conduit(self, app: str, conduit_id: str) -> str:
        key = keys.conduit(self.platform, app)
        await self.redis.set(key, conduit_id, nx=True)
        found = await self.conduit(app)
        return found if found is not None else conduit_id

    async def replace_conduit(self, app: str, old: str | None, new: str) -> str:
        """Record ``new`` if ``old`` is still recorded (a conduit Twitch no longer has)."""
        key = keys.conduit(self.platform, app)
        if old is None:
            return await self.adopt_conduit(app, new)
        argv = [old, "3", "SET", key, new]
        await cast("Awaitable[int]", self.redis.eval(GUARDED, 1, key, *argv))
        found = await self.conduit(app)
        return found if found is not None else new

    async def claim(self, conduit_id: str, shard: int, owner: str, lease: float) -> bool:
        key = keys.conduit_shard(self.platform, conduit_id, shard)
        return bool(await self.redis.set(key, owner, nx=True, px=_ms(lease)))

    async def renew(self, conduit_id: str, shard: int, owner: str, lease: float) -> bool:
        key = keys.conduit_shard(self.platform, conduit_id, shard)
        argv = [owner, "3", "PEXPIRE", key, str(_ms(lease))]
        return bool(await cast("Awaitable[int]", self.redis.eval(GUARDED, 1, key, *argv)))

    async def release(self, conduit_id: str, shard: int, owner: str) -> bool:
        key = keys.conduit_shard(self.platform, conduit_id, shard)
        argv = [owner, "2", "DEL", key]
        return bool(await cast("Awaitable[int]", self.redis.eval(GUARDED, 1, key, *argv)))

    async def owners(self, conduit_id: str, count: int) -> dict[int, str]:
        if count <= 0:
            return {}
        names = [keys.conduit_shard(self.platform, conduit_id, n) for n in range(count)]
        values = await self.redis.mget(names)
        return {n: _text(v) for n, v in enumerate(values) if v is not None}

    async def heartbeat(self, conduit_id: str, owner: str, lease: float) -> list[str]:
        key = keys.conduit_members(self.platform, conduit_id)
        now_ms = round(self.clock() * 1000)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zadd(key, {owner: now_ms + _ms(lease)})
            pipe.zremrangebyscore(key, "-inf", now_ms)
            pipe.zrange(key, 0, -1)
            pipe.pexpire(key, _ms(lease) * 4)
            results = await pipe.execute()
        return sorted(_text(m) for m in results[2])

    async def leave_members(self, conduit_id: str, owner: str) -> None:
        await self.redis.zrem(keys.conduit_members(self.platform, conduit_id), owner)

    async def size(self, conduit_id: str) -> int | None:
        raw = await self.redis.get(keys_conduits.conduit_size(self.platform, conduit_id))
        return None if raw is None else int(_text(raw))

    async def set_size(self, conduit_id: str, count: int) -> None:
        await self.redis.set(keys_conduits.conduit_size(self.platform, conduit_id), str(count))

    async def join_channel(self, app: str, channel: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.sadd(keys.joined_channels(self.platform, app, "in"), channel)
            pipe.srem(keys.joined_channels(self.platform, app, "out"), channel)
            pipe.incr(keys.joined_channels(self.platform, app, "gen"))
            await pipe.execute()

    async def leave_channel(self, app: str, channel: str) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.srem(keys.joined_channels(self.platform, app, "in"), channel)
            pipe.sadd(keys.joined_channels(self.platform, app, "out"), channel)
            pipe.incr(keys.joined_channels(self.platform, app, "gen"))
            await pipe.execute()

    async def channel_changes(self, app: str) -> tuple[set[str], set[str], int]:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.smembers(keys.joined_channels(self.platform, app, "in"))
            pipe.smembers(keys.joined_channels(self.platform, app, "out"))
            pipe.get(keys.joined_channels(self.platform, app, "gen"))
            joined, left, gen = await pipe.execute()
        count = int(_text(gen)) if gen is not None else 0
        return {_text(c) for c in joined}, {_text(c) for c in left}, count


@dataclass
class MemoryConduitStore:
    """``ConduitStore`` in this process's memory (the twin: same rules, no Redis)."""

    clock: Clock = time.time
    conduits: dict[str, str] = field(default_factory=dict)
    leases: dict[tuple[str, int], tuple[str, float]] = field(default_factory=dict)
    members: dict[str, dict[str, float]] = field(default_factory=dict)
    joined: dict[str, set[str]] = field(default_factory=dict)
    left: dict[str, set[str]] = field(default_factory=dict)
    changes: dict[str, int] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)

    def _holder(self, conduit_id: str, shard: int) -> str | None:
        found = self.leases.get((conduit_id, shard))
        if found is None:
            return None
        if found[1] <= self.clock():
            del self.leases[(conduit_id, shard)]
            return None
        return found[0]

    async def conduit(self, app: str) -> str | None:
        return self.conduits.get(app)

    async def adopt_conduit(self, app: str, conduit_id: str) -> str:
        return self.conduits.setdefault(app, conduit_id)

    async def replace_conduit(self, app: str, old: str | None, new: str) -> str:
        if old is None:
            return await self.adopt_conduit(app, new)
        if self.conduits.get(app) == old:
            self.conduits[app] = new
        return self.conduits.get(app, new)

    async def claim(self, conduit_id: str, shard: int, owner: str, lease: float) -> bool:
        if self._holder(conduit_id, shard) is not None:
            return False
        self.leases[(conduit_id, shard)] = (owner, self.clock() + _ms(lease) / 1000)
        return True

    async def renew(self, conduit_id: str, shard: int, owner: str, lease: float) -> bool:
        if self._holder(conduit_id, shard) != owner:
            return False
        self.leases[(conduit_id, shard)] = (owner, self.clock() + _ms(lease) / 1000)
        return True

    async def release(self, conduit_id: str, shard: int, owner: str) -> bool:
        if self._holder(conduit_id, shard) != owner:
            return False
        del self.leases[(conduit_id, shard)]
        return True

    async def owners(self, conduit_id: str, count: int) -> dict[int, str]:
        held = {n: self._holder(conduit_id, n) for n in range(max(0, count))}
        return {n: owner for n, owner in held.items() if owner is not None}

    async def heartbeat(self, conduit_id: str, owner: str, lease: float) -> list[str]:
        now = self.clock()
        live = self.members.setdefault(conduit_id, {})
        live[owner] = now + _ms(lease) / 1000
        for member, until in list(live.items()):
            if until <= now:
                del live[member]
        return sorted(live)

    async def leave_members(self, conduit_id: str, owner: str) -> None:
        self.members.get(conduit_id, {}).pop(owner, None)

    async def size(self, conduit_id: str) -> int | None:
        return self.sizes.get(conduit_id)

    async def set_size(self, conduit_id: str, count: int) -> None:
        self.sizes[conduit_id] = count

    async def join_channel(self, app: str, channel: str) -> None:
        self.joined.setdefault(app, set()).add(channel)
        self.left.setdefault(app, set()).discard(channel)
        self.changes[app] = self.changes.get(app, 0) + 1

    async def leave_channel(self, app: str, channel: str) -> None:
        self.joined.setdefault(app, set()).discard(channel)
        self.left.setdefault(app, set()).add(channel)
        self.changes[app] = self.changes.get(app, 0) + 1

    async def channel_changes(self, app: str) -> tuple[set[str], set[str], int]:
        return (
            set(self.joined.get(app, set())),
            set(self.left.get(app, set())),
            self.changes.get(app, 0),
        )
