"""What the stream overlay keeps in Redis so workers and the serving process agree: each
channel's overlay key, its queue of spoken items and controls, its pause and volume, and
whether an overlay is watching.

- ``OverlayKeys``: one random key per channel (``keys.voice_overlay_key``), made on first use,
  replaced by ``rotate`` (the old one stops working at once, on every process).
- ``VoiceQueue``: a stream per channel (``keys.voice_queue``): items to speak and control events
  (skip, pause, resume, volume), capped at ``max_len`` entries. The stream's entry ids are the
  overlay's event ids: a page that reconnects reads on from the last id it saw, never again
  what it already spoke.
- the control hash (``keys.voice_control``): ``paused`` and ``volume``, read with the watching
  flag (``keys.voice_watching``) in one ``MGET``-like pipeline by a worker before it speaks.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from bot.events import ConversationKey
from bot.state import keys
from bot.state.client import Redis, is_cluster
from bot.state.turnlog import TurnRecord, queue_records

WATCH_TTL_SECONDS = 10


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class OverlayKeys:
    """Each channel's overlay key."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def get(self, conv: ConversationKey) -> str:
        """The channel's key, made (and kept) on first use."""
        key = keys.voice_overlay_key(conv)
        # the channel's key and the index of channels hash apart on a Redis Cluster: there the
        # commands go one at a time (the key's own SET NX and GET keep their order)
        async with self.redis.pipeline(transaction=not is_cluster(self.redis)) as pipe:
            pipe.set(key, secrets.token_urlsafe(24), nx=True)
            pipe.sadd(keys.voice_channels(), str(conv))
            pipe.get(key)
            found = await pipe.execute()
        return _text(found[2])

    async def channels(self) -> list[ConversationKey]:
        """Every channel that has an overlay key (the dashboard lists them)."""
        found = await self.redis.smembers(keys.voice_channels())
        return [ConversationKey.parse(name) for name in sorted(_text(m) for m in found)]

    async def rotate(self, conv: ConversationKey) -> str:
        fresh = secrets.token_urlsafe(24)
        async with self.redis.pipeline(transaction=not is_cluster(self.redis)) as pipe:
            pipe.set(keys.voice_overlay_key(conv), fresh)
            pipe.sadd(keys.voice_channels(), str(conv))
            await pipe.execute()
        return fresh

    async def check(self, conv: ConversationKey, given: str) -> bool:
        found = await self.redis.get(keys.voice_overlay_key(conv))
        return found is not None and bool(given) and secrets.compare_digest(_text(found), given)


@dataclass(frozen=True, slots=True)
class Control:
    watching: bool
    paused: bool
    volume: int


class VoiceQueue:
    """Each channel's queue of spoken items and controls."""

    def __init__(self, redis: Redis, *, max_len: int = 200) -> None:
        self.redis = redis
        self.max_len = max_len

    async def push(self, conv: ConversationKey, event: Mapping[str, Any]) -> str:
        found = await self.redis.xadd(
            keys.voice_queue(conv),
            {"event": json.dumps(dict(event))},
            maxlen=self.max_len,
            approximate=True,
        )
        return _text(found)

    async def read(
        self, conv: ConversationKey, after: str, block_ms: int, count: int = 20
    ) -> list[tuple[str, dict[str, Any]]]:
        """Entries after id ``after`` (``$``: only new ones), waiting up to ``block_ms``."""
        found: Any = await self.redis.xread(
            {keys.voice_queue(conv): after}, count=count, block=block_ms
        )
        out: list[tuple[str, dict[str, Any]]] = []
        for _stream, entries in found or []:
            for entry_id, fields in entries:
                out.append((_text(entry_id), _event(fields)))
        return out

    async def last_id(self, conv: ConversationKey) -> str:
        found: Any = await self.redis.xrevrange(keys.voice_queue(conv), count=1)
        return _text(found[0][0]) if found else "0-0"

    async def recent(self, conv: ConversationKey, count: int = 50) -> list[dict[str, Any]]:
        found: Any = await self.redis.xrevrange(keys.voice_queue(conv), count=count)
        return [{"id": _text(entry_id)} | _event(fields) for entry_id, fields in reversed(found)]

    async def control(self, conv: ConversationKey) -> Control:
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(keys.voice_watching(conv))
            pipe.hgetall(keys.voice_control(conv))
            watching, values = await pipe.execute()
        table = {_text(k): _text(v) for k, v in (values or {}).items()}
        return Control(
            bool(watching), table.get("paused") == "1", int(table.get("volume", "100") or 100)
        )

    async def set_control(self, conv: ConversationKey, **values: str) -> None:
        mapping: dict[str | bytes, str | bytes] = {name: value for name, value in values.items()}
        await self.redis.hset(keys.voice_control(conv), mapping=mapping)  # type: ignore[arg-type]

    async def watched(self, conv: ConversationKey) -> None:
        """An overlay of the channel is connected (refresh more often than the TTL)."""
        await self.redis.set(keys.voice_watching(conv), "1", ex=WATCH_TTL_SECONDS)


async def entry(redis: Redis, conv: ConversationKey, entry_id: str) -> dict[str, Any] | None:
    """One queued event by its id (None when the stream no longer holds it)."""
    found: Any = await redis.xrange(keys.voice_queue(conv), min=entry_id, max=entry_id, count=1)
    return _event(found[0][1]) if found else None


def _event(fields: Any) -> dict[str, Any]:
    raw = fields.get(b"event", fields.get("event", "{}"))
    loaded: dict[str, Any] = json.loads(_text(raw))
    return loaded


# KEYS: channel counter, viewer counter. ARGV: chars, channel limit, viewer limit, ttl (0: none)
_TAKE = """
local chars = tonumber(ARGV[1])
local chan = tonumber(redis.call('GET', KEYS[1]) or '0')
local user = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[2]) > 0 and chan + chars > tonumber(ARGV[2]) then return 1 end
if tonumber(ARGV[3]) > 0 and user + chars > tonumber(ARGV[3]) then return 2 end
redis.call('INCRBY', KEYS[1], chars)
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('INCRBY', KEYS[2], chars)
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 0
"""


class SpokenChars:
    """Characters spoken per channel and per viewer per UTC hour: checked and counted in one
    atomic step, so workers speaking in the same channel share one count."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def take(
        self,
        conv: ConversationKey,
        user: str,
        chars: int,
        *,
        channel_limit: int,
        user_limit: int,
        hour: str,
        ttl: int,
    ) -> str | None:
        """Count ``chars``; None when counted, else which limit (``channel``/``user``) it
        would pass (nothing counted)."""
        found = await self.redis.eval(
            _TAKE,
            2,
            keys.voice_chars(conv, "", hour),
            keys.voice_chars(conv, user or "-", hour),
            chars,
            channel_limit,
            user_limit,
            ttl,
        )
        return {0: None, 1: "channel", 2: "user"}[int(found)]

    async def first_notice(self, conv: ConversationKey, who: str, ttl: int) -> bool:
        """Whether this is the first notice of ``who``'s limit in ``ttl`` seconds."""
        return bool(await self.redis.set(keys.voice_notice(conv, who), "1", ex=ttl, nx=True))


async def log_spoken(redis: Redis, conv: ConversationKey, record: TurnRecord) -> None:
    """A ``spoken`` record in the channel's turn log (what the dashboard's conversation shows)."""
    async with redis.pipeline(transaction=False) as pipe:
        queue_records(pipe, conv, [record], names=False)
        await pipe.execute()
