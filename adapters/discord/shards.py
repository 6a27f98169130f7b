"""Discord shards: which ones this process connects, when each may IDENTIFY, how each fares.

Discord splits a bot's guilds over ``shard_count`` gateway sessions (a guild's shard is
``(guild_id >> 22) % shard_count``) and refuses a bot in 2,500 or more guilds that does not
shard. ``GET /gateway/bot`` recommends the count and says how many sessions may start at once
(``max_concurrency``: one IDENTIFY per bucket ``shard_id % max_concurrency`` per 5 seconds).

- ``plan`` picks the count (``DISCORD_SHARD_COUNT`` or the recommendation) and this process's
  shards (``DISCORD_SHARD_IDS`` or all of them); a range beyond the count is a ``ConfigError``
  naming the variable.
- ``IdentifyPacer`` is what discord.py's ``before_identify_hook`` awaits: the shard's bucket is
  taken in the state store (``bot.state.identify``), so gateway processes with different ranges
  never IDENTIFY in one bucket within a window; without a store (one process, in tests) the
  same rule is kept in memory. RESUMEs are not IDENTIFYs and do not wait.
- ``ShardStates`` is each shard's session as discord.py reports it (``shard_connect``,
  ``shard_resumed``, ``shard_disconnect``): readiness, metrics and the supervisor's decision
  to reconnect one shard alone all read it.
- ``ShardedParts`` is the adapter's shard side: the plan applied to discord.py's
  ``AutoShardedClient`` after login, readiness (every shard, and each one), and the parts the
  supervisor watches and restarts one at a time. When the plan leaves some shards to other
  processes, slash-command answers are routed between them (``routed.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import discord

from bot.settings import ConfigError, DiscordSettings
from bot.settings.discord import check_shard_ids
from bot.state.client import Redis
from bot.state.identify import IdentifyBuckets
from bot.state.interactions import PendingInteractions

log = logging.getLogger("chorus.discord")

# Seconds added to each identify window: an IDENTIFY leaves a moment after its bucket was taken,
# so two processes' IDENTIFYs stay a full window apart as Discord measures them.
IDENTIFY_MARGIN = 0.25


@dataclass(frozen=True)
class ShardPlan:
    count: int
    ids: tuple[int, ...]
    max_concurrency: int

    def bucket(self, shard_id: int) -> int:
        return shard_id % max(1, self.max_concurrency)


def plan(settings: DiscordSettings, recommended: int, limits: Mapping[str, Any]) -> ShardPlan:
    """This process's shards from the settings and ``GET /gateway/bot``'s answer."""
    count = settings.shard_count or max(1, int(recommended))
    source = "DISCORD_SHARD_COUNT" if settings.shard_count else "the count Discord recommends"
    problem = settings.gateway_pair_problem()
    if problem is not None:
        raise ConfigError(problem)
    ids = settings.shards_of(count)
    if not ids:
        raise ConfigError(
            f"DISCORD_GATEWAY_INDEX {settings.gateway_index} of DISCORD_GATEWAY_COUNT "
            f"{settings.gateway_count} has no shard: there are only {count}; lower "
            "DISCORD_GATEWAY_COUNT (the gateway replicas) or raise DISCORD_SHARD_COUNT"
        )
    if settings.shard_count is None and (settings.shard_ids or settings.gateway_count):
        log.warning(
            "DISCORD_SHARD_COUNT is unset while this process connects a part of the shards: "
            "every gateway process must use the same count, and Discord's recommendation can "
            "change between their starts; pin DISCORD_SHARD_COUNT",
            extra={"recommended": count},
        )
    try:
        check_shard_ids(ids, count, source=source)
    except ValueError as exc:
        raise ConfigError(f"{exc}; set DISCORD_SHARD_COUNT to pin the count") from None
    concurrency = max(1, int(limits.get("max_concurrency", 1)))
    if int(limits.get("remaining", 1)) <= len(ids):
        log.warning(
            "few Discord session starts left today",
            extra={
                "remaining": limits.get("remaining"),
                "reset_after_ms": limits.get("reset_after"),
            },
        )
    return ShardPlan(count=count, ids=tuple(ids), max_concurrency=concurrency)


class Buckets(Protocol):
    async def take(self, bucket: int, window: float) -> float: ...


class LocalBuckets:
    """The identify rule within one process, for an adapter without a shared store."""

    def __init__(self, sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._free_at: dict[int, float] = {}
        self._lock = asyncio.Lock()
        self._sleep = sleep

    async def take(self, bucket: int, window: float) -> float:
        async with self._lock:
            wait = max(0.0, self._free_at.get(bucket, 0.0) - time.monotonic())
            if wait:
                await self._sleep(wait)
            self._free_at[bucket] = time.monotonic() + window
            return wait


class IdentifyPacer:
    """Waits for a shard's identify bucket before discord.py sends its IDENTIFY."""

    def __init__(self, buckets: Buckets, window: float) -> None:
        self.buckets = buckets
        self.window = window + IDENTIFY_MARGIN
        self.plan: ShardPlan | None = None

    async def before_identify(self, shard_id: int | None) -> None:
        current = self.plan
        bucket = current.bucket(shard_id or 0) if current is not None else 0
        waited = await self.buckets.take(bucket, self.window)
        log.info(
            "discord shard identifying",
            extra={"shard": shard_id, "bucket": bucket, "waited_s": round(waited, 3)},
        )


@dataclass
class ShardStates:
    """Each shard's session: live since READY or RESUMED, down since a disconnect."""

    live: dict[int, bool] = field(default_factory=dict)
    since: dict[int, float] = field(default_factory=dict)  # monotonic time of the last change
    connects: dict[int, int] = field(default_factory=dict)  # READYs (IDENTIFYs answered)
    resumes: dict[int, int] = field(default_factory=dict)
    drops: dict[int, int] = field(default_factory=dict)

    def connected(self, shard_id: int) -> None:
        self._set(shard_id, True)
        self.connects[shard_id] = self.connects.get(shard_id, 0) + 1

    def resumed(self, shard_id: int) -> None:
        self._set(shard_id, True)
        self.resumes[shard_id] = self.resumes.get(shard_id, 0) + 1

    def disconnected(self, shard_id: int) -> None:
        if self.live.get(shard_id):
            self.drops[shard_id] = self.drops.get(shard_id, 0) + 1
        self._set(shard_id, False)

    def clear(self) -> None:
        for shard_id in list(self.live):
            self._set(shard_id, False)

    def _set(self, shard_id: int, live: bool) -> None:
        if self.live.get(shard_id) != live or shard_id not in self.since:
            self.since[shard_id] = time.monotonic()
        self.live[shard_id] = live


def part_name(shard_id: int) -> str:
    """The supervisor's and readiness's name of a shard."""
    return f"shard:{shard_id}"


def shard_of(name: str) -> int | None:
    prefix, _, number = name.partition(":")
    return int(number) if prefix == "shard" and number.isdigit() else None


class ShardedParts:
    """What ``DiscordAdapter`` does with its shards (it provides these attributes)."""

    client: discord.AutoShardedClient
    settings: DiscordSettings
    shards: ShardStates
    pacer: IdentifyPacer
    _identify_store: Redis | None
    # Set when this process holds only some of the shards (another process may read the answer
    # to an interaction of ours, or we one of theirs): see adapters/discord/routed.py.
    pending: PendingInteractions | None

    async def _plan_shards(self) -> None:
        """The shard count and this process's shards, from ``GET /gateway/bot`` and the
        settings; the identify buckets on the shared store once the bot's id is known."""
        recommended, _url, limits = await self.client.http.get_bot_gateway()
        chosen = plan(self.settings, recommended, dict(limits))
        self.client.shard_count = chosen.count
        self.client.shard_ids = list(chosen.ids)
        self.pacer.plan = chosen
        user = self.client.user
        if self._identify_store is not None and user is not None:
            self.pacer.buckets = IdentifyBuckets(self._identify_store, str(user.id))
        if self._identify_store is not None and len(chosen.ids) < chosen.count:
            self.pending = PendingInteractions(self._identify_store)
        log.info(
            "discord shards planned",
            extra={
                "shard_count": chosen.count,
                "shards": ",".join(map(str, chosen.ids)),
                "max_concurrency": chosen.max_concurrency,
            },
        )

    def shard_live(self, shard_id: int) -> bool:
        """One shard's session is READY (or RESUMED since its last drop) and its websocket open."""
        info = self.client.get_shard(shard_id)
        return bool(self.shards.live.get(shard_id)) and info is not None and not info.is_closed()

    async def ready(self) -> bool:
        """Connected: every shard of this process has its gateway session READY (or RESUMED
        since its last drop) with its websocket open, as discord.py itself knows it; no request
        is made. While discord.py reconnects a shard (Discord down, a drop, a missed heartbeat
        ACK) this is False, and it turns True again by itself once the session is back."""
        ids = self.client.shard_ids
        if self.client.is_closed() or not ids:
            return False
        return all(self.shard_live(shard_id) for shard_id in ids)

    # -- shards, for the supervisor and readiness ---------------------------------------------
    def expected_parts(self) -> list[str]:
        """The shards this process will connect, where the settings say so before connecting."""
        settings = self.settings
        ids = settings.shard_ids or (range(settings.shard_count) if settings.shard_count else ())
        return [part_name(i) for i in ids]

    def parts(self) -> dict[str, bool]:
        """Each launched shard -> live."""
        return {part_name(i): self.shard_live(i) for i in self.client.shards}

    async def part_ready(self, name: str) -> bool:
        shard_id = shard_of(name)
        return shard_id is not None and self.shard_live(shard_id)

    async def restart_part(self, name: str) -> None:
        """Reconnect one shard (a new session; the other shards are not touched)."""
        shard_id = shard_of(name)
        info = self.client.get_shard(shard_id) if shard_id is not None else None
        if info is not None:
            self.shards.disconnected(info.id)
            await info.reconnect()
