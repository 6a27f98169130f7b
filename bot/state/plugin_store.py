"""What plugins keep: small values and lists under ``chorus:v1:plugin:*``, and what each user
owns of them, for ``/forget``.

``PluginKV`` is the seam; ``RedisPluginStore`` keeps the data in Redis (the real server or the
embedded store) and ``MemoryPluginStore`` is its in-memory twin. tests/test_plugin_store.py
holds both to one contract. The plugin API (``bot/plugins/store.py``) builds on it: it picks the
keys (``keys.plugin_data``: the plugin, a scope, the place, the name) and turns values into JSON.

Every key has a TTL (the caller's, at most ``MAX_TTL_SECONDS``; ``DEFAULT_TTL_SECONDS`` when none
is given), refreshed by every write, so nothing a plugin writes outlives its use forever. A value
or a list entry written with an ``owner`` (a platform and a user id) is recorded in that user's
set ``keys.plugin_owned``, whose TTL is the longest any value can have; ``forget`` deletes the
owned values and removes the owned entries from their lists (``LREM`` of the exact entries, so
an entry another user pushed meanwhile is never lost). A list entry carries its owner in front
of the value, ``platform:user\\x1f`` (empty when nobody owns it), so it is found without JSON.

On a Redis Cluster a value and its owner's set hash to different slots (the set is in the
user's slot, ``keys.user``; a list holds entries of many users), so a write with an owner is
two steps there: the owner's set first, then the value's own transaction (one key). A writer
killed between the two leaves a set naming a value that is not there, which ``forget`` skips;
never a value ``forget`` cannot find. One more round trip on a cluster, none on one Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from bot.events import escape_key_part
from bot.state import keys
from bot.state.client import Pipeline, is_cluster
from bot.state.connect import Client

DEFAULT_TTL_SECONDS = 365 * 24 * 3600
MAX_TTL_SECONDS = DEFAULT_TTL_SECONDS
SEP = "\x1f"  # between a list entry's owner and its value
VALUE, LIST = "k", "l"  # kinds of member of a user's owned set


class Owner(NamedTuple):
    """Who a value belongs to: the platform and the user's id there (never a display name)."""

    platform: str
    user_id: str

    @property
    def tag(self) -> str:
        return f"{self.platform}:{escape_key_part(self.user_id)}"


class Entry(NamedTuple):
    """One list entry: its value (JSON text) and who owns it."""

    value: str
    owner: str | None  # Owner.tag


def ttl_ms(ttl: float | None) -> int:
    """A TTL in milliseconds: the default when None, refused when not positive or too long."""
    seconds = DEFAULT_TTL_SECONDS if ttl is None else ttl
    if not 0 < seconds <= MAX_TTL_SECONDS:
        raise ValueError(f"ttl must be between 0 and {MAX_TTL_SECONDS} seconds, got {ttl}")
    return max(1, round(seconds * 1000))


def _entry(raw: str) -> Entry:
    owner, _, value = raw.partition(SEP)
    return Entry(value, owner or None)


class PluginKV(Protocol):
    """What plugins keep, by full key (``keys.plugin_data``)."""

    async def get(self, key: str) -> str | None: ...
    async def put(
        self, key: str, value: str, *, ttl: float | None, owner: Owner | None
    ) -> None: ...
    async def delete(self, key: str) -> bool: ...
    async def incr(self, key: str, by: int, *, ttl: float | None, owner: Owner | None) -> int: ...
    async def claim(self, key: str, value: str, *, ttl: float) -> bool: ...
    async def push(
        self, key: str, value: str, *, ttl: float | None, owner: Owner | None, max_len: int | None
    ) -> int: ...
    async def entries(self, key: str, start: int, stop: int) -> list[Entry]: ...
    async def length(self, key: str) -> int: ...
    async def forget(self, platform: str, user_id: str) -> int: ...


class RedisPluginStore:
    """``PluginKV`` in Redis."""

    def __init__(self, redis: Client) -> None:
        self.redis = redis

    async def get(self, key: str) -> str | None:
        raw = await self.redis.get(key)
        return raw.decode() if isinstance(raw, bytes) else raw

    async def put(self, key: str, value: str, *, ttl: float | None, owner: Owner | None) -> None:
        ms = ttl_ms(ttl)
        owner = await self._own_first(owner, VALUE, key)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(key, value, px=ms)
            self._own(pipe, owner, VALUE, key)
            await pipe.execute()

    async def delete(self, key: str) -> bool:
        return bool(await self.redis.delete(key))

    async def incr(self, key: str, by: int, *, ttl: float | None, owner: Owner | None) -> int:
        ms = ttl_ms(ttl)
        owner = await self._own_first(owner, VALUE, key)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.incrby(key, by)
            pipe.pexpire(key, ms)
            self._own(pipe, owner, VALUE, key)
            result = await pipe.execute()
        return int(result[0])

    async def claim(self, key: str, value: str, *, ttl: float) -> bool:
        """Set ``key`` only when it has no value (``SET NX``): whether this call set it."""
        return bool(await self.redis.set(key, value, nx=True, px=ttl_ms(ttl)))

    async def push(
        self, key: str, value: str, *, ttl: float | None, owner: Owner | None, max_len: int | None
    ) -> int:
        ms = ttl_ms(ttl)
        if max_len is not None and max_len < 1:
            raise ValueError(f"max_len must be at least 1, got {max_len}")
        tag = owner.tag if owner else ""
        owner = await self._own_first(owner, LIST, key)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.rpush(key, f"{tag}{SEP}{value}")
            if max_len is not None:
                pipe.ltrim(key, -max_len, -1)
            pipe.pexpire(key, ms)
            self._own(pipe, owner, LIST, key)
            result = await pipe.execute()
        return min(int(result[0]), max_len) if max_len is not None else int(result[0])

    async def entries(self, key: str, start: int, stop: int) -> list[Entry]:
        raw = await self.redis.lrange(key, start, stop)
        return [_entry(item.decode() if isinstance(item, bytes) else item) for item in raw]

    async def length(self, key: str) -> int:
        return int(await self.redis.llen(key))

    async def forget(self, platform: str, user_id: str) -> int:
        """Delete what ``(platform, user_id)`` owns; how many values and entries went."""
        index = keys.plugin_owned(platform, user_id)
        members = await self.redis.smembers(index)
        tag = Owner(platform, user_id).tag + SEP
        removed = 0
        for raw in members:
            member = raw.decode() if isinstance(raw, bytes) else str(raw)
            kind, _, key = member.partition(" ")
            if kind == VALUE:
                removed += int(await self.redis.delete(key))
                continue
            for item in set(await self.redis.lrange(key, 0, -1)):
                text = item.decode() if isinstance(item, bytes) else str(item)
                if text.startswith(tag):
                    removed += int(await self.redis.lrem(key, 0, text))
        await self.redis.delete(index)
        return removed

    async def _own_first(self, owner: Owner | None, kind: str, key: str) -> Owner | None:
        """On a cluster: record ``owner``'s set on its own (another slot than ``key``'s) and
        return None (nothing left to record in the value's transaction); else ``owner``."""
        if owner is None or not is_cluster(self.redis):
            return owner
        async with self.redis.pipeline(transaction=True) as pipe:
            self._own(pipe, owner, kind, key)
            await pipe.execute()
        return None

    @staticmethod
    def _own(pipe: Pipeline, owner: Owner | None, kind: str, key: str) -> None:
        if owner is None:
            return
        index = keys.plugin_owned(owner.platform, owner.user_id)
        pipe.sadd(index, f"{kind} {key}")
        pipe.pexpire(index, ttl_ms(MAX_TTL_SECONDS))


class TimerClaims:
    """Who runs each firing of a plugin's timer: the first worker to claim it (``SET NX`` with
    a TTL past the next firing), in Redis so every worker of the deployment agrees; on the
    embedded store, the one process. A worker that died simply claims nothing more: the next
    firing goes to whichever live worker claims it first."""

    def __init__(self, redis: Client, namespace: str = "main") -> None:
        self.redis = redis
        self.namespace = namespace

    async def take(self, plugin: str, timer: str, slot: int, worker: str, ttl_ms: int) -> bool:
        key = keys.plugin_timer(plugin, timer, slot, self.namespace)
        return bool(await self.redis.set(key, worker, nx=True, px=max(1, ttl_ms)))


@dataclass
class MemoryPluginStore:
    """``PluginKV`` in this process's memory (the twin: same rules, no Redis)."""

    clock: Callable[[], float] = time.monotonic
    values: dict[str, tuple[str, float]] = field(default_factory=dict)  # key -> (value, expires)
    lists: dict[str, tuple[list[str], float]] = field(default_factory=dict)
    owned: dict[tuple[str, str], set[str]] = field(default_factory=dict)

    def _live(self, key: str) -> None:
        now = self.clock()
        if key in self.values and self.values[key][1] <= now:
            del self.values[key]
        if key in self.lists and self.lists[key][1] <= now:
            del self.lists[key]

    def _expires(self, ttl: float | None) -> float:
        return self.clock() + ttl_ms(ttl) / 1000

    def _own(self, owner: Owner | None, kind: str, key: str) -> None:
        if owner is not None:
            self.owned.setdefault((owner.platform, owner.user_id), set()).add(f"{kind} {key}")

    async def get(self, key: str) -> str | None:
        self._live(key)
        found = self.values.get(key)
        return found[0] if found else None

    async def put(self, key: str, value: str, *, ttl: float | None, owner: Owner | None) -> None:
        expires = self._expires(ttl)
        self.lists.pop(key, None)
        self.values[key] = (value, expires)
        self._own(owner, VALUE, key)

    async def delete(self, key: str) -> bool:
        self._live(key)
        return self.values.pop(key, None) is not None or self.lists.pop(key, None) is not None

    async def incr(self, key: str, by: int, *, ttl: float | None, owner: Owner | None) -> int:
        expires = self._expires(ttl)
        self._live(key)
        current = self.values.get(key, ("0", 0.0))[0]
        try:
            total = int(current) + by
        except ValueError:
            raise ValueError(f"{key} does not hold an integer") from None
        self.values[key] = (str(total), expires)
        self._own(owner, VALUE, key)
        return total

    async def claim(self, key: str, value: str, *, ttl: float) -> bool:
        self._live(key)
        if key in self.values:
            return False
        self.values[key] = (value, self._expires(ttl))
        return True

    async def push(
        self, key: str, value: str, *, ttl: float | None, owner: Owner | None, max_len: int | None
    ) -> int:
        expires = self._expires(ttl)
        if max_len is not None and max_len < 1:
            raise ValueError(f"max_len must be at least 1, got {max_len}")
        self._live(key)
        items = self.lists.get(key, ([], 0.0))[0]
        items.append(f"{owner.tag if owner else ''}{SEP}{value}")
        if max_len is not None:
            del items[: max(0, len(items) - max_len)]
        self.lists[key] = (items, expires)
        self._own(owner, LIST, key)
        return len(items)

    async def entries(self, key: str, start: int, stop: int) -> list[Entry]:
        self._live(key)
        items = self.lists.get(key, ([], 0.0))[0]
        end = len(items) if stop == -1 else (stop + 1 if stop >= 0 else len(items) + stop + 1)
        return [_entry(raw) for raw in items[start if start >= 0 else len(items) + start : end]]

    async def length(self, key: str) -> int:
        self._live(key)
        return len(self.lists.get(key, ([], 0.0))[0])

    async def forget(self, platform: str, user_id: str) -> int:
        tag = Owner(platform, user_id).tag + SEP
        removed = 0
        for member in self.owned.pop((platform, user_id), set()):
            kind, _, key = member.partition(" ")
            self._live(key)
            if kind == VALUE:
                removed += self.values.pop(key, None) is not None
            elif key in self.lists:
                items, expires = self.lists[key]
                kept = [item for item in items if not item.startswith(tag)]
                removed += len(items) - len(kept)
                self.lists[key] = (kept, expires)
        return removed
