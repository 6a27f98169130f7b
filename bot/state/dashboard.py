"""What the admin dashboard keeps in Redis so every process serving it agrees: the login attempts
of each client address, and the records that end sessions early.

The rules are ``bot.admin``'s (``login.LoginGuard``: how many attempts, how long a window, what
a refusal says; ``sessions.Sessions``: what ends a session); this module keeps their data, each
step atomic where the rule needs it:

- ``LoginAttempts``: one sorted set per address (``keys.admin_login_failures``), an attempt is a
  member scored by its time. ``reserve`` prunes the window, adds the attempt and reads the set in
  one transaction, so attempts racing through several processes or requests all see each other.
- ``SessionRecords``: a revocation per ended session (``keys.admin_revoked``, living as long as
  the session could) and the token record (``keys.admin_token``: the token's fingerprint and
  since when it holds), read together in one ``MGET`` per request.
"""

from __future__ import annotations

import math

from bot.state import keys
from bot.state.client import Redis


class LoginAttempts:
    """The login attempts of each client address, in a window of ``window`` seconds."""

    def __init__(self, redis: Redis, *, namespace: str, window: float) -> None:
        self.redis = redis
        self.namespace = namespace
        self.window = window

    async def reserve(self, address: str, attempt: str, now: float) -> list[tuple[str, float]]:
        """Add ``attempt`` (at ``now``) after pruning what left the window; the attempts in the
        window besides it, with their times."""
        key = keys.admin_login_failures(address, self.namespace)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.zremrangebyscore(key, "-inf", f"({now - self.window!r}")
            pipe.zadd(key, {attempt: now})
            pipe.zrange(key, 0, -1, withscores=True)
            pipe.expire(key, math.ceil(self.window))
            found = (await pipe.execute())[2]
        pairs = [(_text(member), float(at)) for member, at in found]
        return [(member, at) for member, at in pairs if member != attempt]

    async def take_back(self, address: str, attempt: str) -> None:
        await self.redis.zrem(keys.admin_login_failures(address, self.namespace), attempt)

    async def replace(self, address: str, attempt: str, failure: str, now: float) -> int:
        """``attempt`` becomes ``failure`` (at ``now``); how many the window holds now."""
        key = keys.admin_login_failures(address, self.namespace)
        async with self.redis.pipeline(transaction=True) as pipe:
            if attempt:
                pipe.zrem(key, attempt)
                pipe.zadd(key, {failure: now})
                pipe.expire(key, math.ceil(self.window))
            pipe.zcard(key)
            found = await pipe.execute()
        return int(found[-1])

    async def clear(self, address: str) -> None:
        await self.redis.delete(keys.admin_login_failures(address, self.namespace))


class SessionRecords:
    """Revoked sessions and the deployment's token record."""

    def __init__(self, redis: Redis, *, namespace: str) -> None:
        self.redis = redis
        self.namespace = namespace
        self._token_key = keys.admin_token(namespace)

    async def token(self) -> str | None:
        found = await self.redis.get(self._token_key)
        return None if found is None else _text(found)

    async def set_token(self, record: str, ttl_seconds: int) -> None:
        await self.redis.set(self._token_key, record, ex=ttl_seconds)

    async def keep_token(self, record: str, ttl_seconds: int) -> None:
        """Write ``record`` unless one is there, and let the record live ``ttl_seconds``."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(self._token_key, record, ex=ttl_seconds, nx=True)
            pipe.expire(self._token_key, ttl_seconds)
            await pipe.execute()

    async def state(self, sid: str) -> tuple[bool, str | None]:
        """Whether session ``sid`` was revoked, and the token record: one round trip."""
        revoked = keys.admin_revoked(sid, self.namespace)
        found = await self.redis.mget([revoked, self._token_key])
        return found[0] is not None, None if found[1] is None else _text(found[1])

    async def revoke(self, sid: str, for_ms: int) -> None:
        await self.redis.set(keys.admin_revoked(sid, self.namespace), "1", px=for_ms)


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
