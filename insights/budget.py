"""Daily token budgets for the insights agent, per user and per channel.

Analyses run on every answered turn, so a chatty user or a busy live chat could spend without
bound on a feature nobody asked for. Each analysis first checks today's counters (UTC day) and
is skipped -- and logged -- when either is spent; afterwards its real usage is added with
``INCRBY``, and the counter expires an hour after its day ends. A check and the charge are not
atomic, so concurrent workers may overshoot a budget by the analyses already under way; a
limit of 0 turns analyses off for everyone.

A channel is platform + channel (all its threads together); an analysis spanning several
conversations charges each channel in full, which errs on the side of spending less.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.state import keys

_GRACE = timedelta(hours=1)


@dataclass(frozen=True)
class Exhausted:
    """Which budget stopped an analysis, and how far it went."""

    scope: str  # "user" or "channel"
    used: int
    limit: int
    channel: str | None = None


class Budget:
    def __init__(self, redis: Redis, *, user_daily: int, channel_daily: int) -> None:
        self._redis = redis
        self.user_daily = user_daily
        self.channel_daily = channel_daily

    async def exhausted(
        self,
        platform: str,
        user_id: str,
        conversations: Iterable[ConversationKey],
        now: datetime,
    ) -> Exhausted | None:
        """The first budget already spent today, or None when the analysis may run."""
        day = _day(now)
        channels = _channels(conversations)
        async with self._redis.pipeline(transaction=False) as pipe:
            pipe.get(keys.budget_user(platform, user_id, day))
            for channel in channels:
                pipe.get(keys.budget_channel(platform, channel, day))
            used = [int(value or 0) for value in await pipe.execute()]
        if used[0] >= self.user_daily:
            return Exhausted("user", used[0], self.user_daily)
        for channel, spent in zip(channels, used[1:], strict=True):
            if spent >= self.channel_daily:
                return Exhausted("channel", spent, self.channel_daily, channel)
        return None

    async def charge(
        self,
        platform: str,
        user_id: str,
        conversations: Iterable[ConversationKey],
        tokens: int,
        now: datetime,
    ) -> None:
        """Add ``tokens`` to today's counters of the user and of each channel."""
        if tokens <= 0:
            return
        day = _day(now)
        # Relative to ``now`` (not EXPIREAT) so an injected clock behaves like the real one.
        ttl = round((_end_of_day(now) + _GRACE - now).total_seconds())
        counters = [keys.budget_user(platform, user_id, day)] + [
            keys.budget_channel(platform, channel, day) for channel in _channels(conversations)
        ]
        async with self._redis.pipeline(transaction=True) as pipe:
            for key in counters:
                pipe.incrby(key, tokens)
                pipe.expire(key, ttl)
            await pipe.execute()

    async def channel_exhausted(
        self, platform: str, channel: str, now: datetime
    ) -> Exhausted | None:
        """The channel's budget when spent today (summaries and community notes have no
        subject user: they count to their channel only)."""
        used = int(await self._redis.get(keys.budget_channel(platform, channel, _day(now))) or 0)
        if used >= self.channel_daily:
            return Exhausted("channel", used, self.channel_daily, channel)
        return None

    async def charge_channel(self, platform: str, channel: str, tokens: int, now: datetime) -> None:
        """Add ``tokens`` to today's counter of the channel."""
        if tokens <= 0:
            return
        key = keys.budget_channel(platform, channel, _day(now))
        ttl = round((_end_of_day(now) + _GRACE - now).total_seconds())
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.incrby(key, tokens)
            pipe.expire(key, ttl)
            await pipe.execute()

    async def used(self, platform: str, user_id: str, now: datetime) -> int:
        return int(await self._redis.get(keys.budget_user(platform, user_id, _day(now))) or 0)


def _day(now: datetime) -> str:
    return now.astimezone(UTC).strftime("%Y%m%d")


def _end_of_day(now: datetime) -> datetime:
    start = now.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start + timedelta(days=1)


def _channels(conversations: Iterable[ConversationKey]) -> list[str]:
    return list(dict.fromkeys(conv.channel for conv in conversations))
