"""The day's quota spend and the replies in flight, shared in Redis by every process.

Two sides spend one Google project's quota: the gateway (the YouTube adapter charges every call
*before* making it, Google charges failed calls too) and the workers (the live-chat policy
decides which turns run). So that concurrent workers -- different chats of one project, or a
partition moving between them -- never promise more than is left, a turn **reserves** its
worst-case cost when it is decided (``reserve``: a hold, atomic in one Lua script that checks
spent + held + wanted against the plan's limit, and for an unprompted turn the project-wide
pacing gap) and the sender **settles** it: every piece it inserts moves units from the hold to
the spend (``charge_insert``, atomic too), and the rest is released once the reply is out or
failed (``release``). A hold nobody settles (the turn died) lapses after ``HOLD_SECONDS``. A
piece no hold covers is sent only if it fits in the reply budget (never in the reading
reserve), so even a reply decided without a hold cannot starve reading.

Keys (bot/state/keys.py; the commands and scripts are ``bot.state.quota_ledger``'s): the day's
hash (``units``, ``inserts``, units by kind), the holds hash and the stream hash (when the chat started, how it is read, mentions seen, the latest
unprompted turn). ``bot.quota.view.MemoryLedger`` is the same rules on dicts, for ``chorus
replay``; the contract suite runs both (tests/test_quota_ledger.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta

from bot.quota.day import next_reset, quota_day
from bot.quota.plan import Budget, QuotaConfig, Reading, Request, StreamView, Usage
from bot.quota.view import HOLD_SECONDS, LedgerView, Refused, Spend, parse_view
from bot.state.connect import Client, StoreError
from bot.state.quota_ledger import LedgerStore

log = logging.getLogger("chorus.quota")

Clock = Callable[[], datetime]
STREAM_TTL = timedelta(days=2)


class QuotaLedger:
    """One project's ledger in Redis. The gateway charges and settles; workers reserve."""

    def __init__(
        self,
        redis: Client,
        config: QuotaConfig,
        *,
        project: str,
        clock: Clock,
        platform: str = "youtube",
    ) -> None:
        self._store = LedgerStore(redis, platform=platform, project=project)
        self.config = config
        self._project = project
        self._platform = platform
        self._clock = clock
        self._day = ""
        self._usage = Usage()
        self.stream: StreamView | None = None
        self.by_kind: dict[str, int] = {}  # the day's units by kind, as last read

    @property
    def usage(self) -> Usage:
        """Today's usage as last seen (a new quota day starts at zero)."""
        return self._usage if self._day == quota_day(self._clock()) else Usage()

    def budget(self) -> Budget:
        """The plan from what was last seen."""
        return LedgerView(self.usage, self.stream).budget(self.config, self._clock())

    def _day_ttl(self, now: datetime) -> int:
        return max(1, int((next_reset(now) + timedelta(hours=1) - now).total_seconds()))

    def _seen(self, now: datetime, usage: Usage) -> Usage:
        self._day, self._usage = quota_day(now), usage
        return usage

    # -- reading --------------------------------------------------------------------------------
    async def view(self, *, add_mentions: int = 0) -> LedgerView:
        """Read the whole ledger in one round trip (adding ``add_mentions`` mentions seen)."""
        now = self._clock()
        day, holds, stream = await self._store.read(
            quota_day(now),
            add_mentions=add_mentions,
            stream_ttl=int(STREAM_TTL.total_seconds()),
        )
        view = parse_view(day, holds, stream, now.timestamp())
        self._seen(now, view.usage)
        self.stream = view.stream or self.stream
        self.by_kind = dict(view.by_kind)
        return view

    async def fresh_budget(self) -> Budget:
        """The plan from a fresh read of the ledger (from the last one if Redis fails)."""
        try:
            await self.view()
        except StoreError:
            log.warning("could not read the quota ledger; planning on the last read", exc_info=True)
        return self.budget()

    async def load(self) -> Usage:
        try:
            return (await self.view()).usage
        except StoreError:
            log.warning("could not read the quota ledger", exc_info=True)
            return self.usage

    # -- the gateway: charges, settles, says what it reads ----------------------------------------
    async def charge(self, units: int, *, kind: Spend = "read") -> Usage:
        """Charge a read or lookup call (before making it); counted in memory if Redis fails."""
        now = self._clock()
        before = self.usage
        try:
            total, inserts = await self._store.charge(
                quota_day(now), self._day_ttl(now), units, kind
            )
            usage = replace(before, units=total, inserts=inserts)
        except StoreError:
            log.warning("quota not persisted; counting in memory", exc_info=True)
            usage = replace(before, units=before.units + units)
        return self._seen(now, usage)

    async def charge_insert(self, hold: str | None, cost: int) -> Usage:
        """Charge one piece of a reply: from its hold, else only within the reply budget.
        ``Refused`` when it may not be sent."""
        now = self._clock()
        before = self.usage
        limit = self.budget().reply_limit
        try:
            outcome, units, inserts, held = await self._store.charge_insert(
                quota_day(now), self._day_ttl(now), hold or "", cost, limit,
                self.config.daily_units, now.timestamp(),
            )  # fmt: skip
        except StoreError:
            log.warning("quota not persisted; counting in memory", exc_info=True)
            if before.units + cost > self.config.daily_units:
                raise Refused(spent=True) from None
            return self._seen(now, replace(before, units=before.units + cost))
        usage = self._seen(now, replace(before, units=units, inserts=inserts, held=held))
        if outcome <= 0:
            raise Refused(spent=outcome < 0)
        return usage

    async def settle(self, hold: str | None, *, sent: bool) -> None:
        """A reply is out (``sent``: at least one piece) or failed: what its hold did not spend
        is free again, and a sent reply counts towards the average reply cost."""
        now = self._clock()
        try:
            await self._store.settle(quota_day(now), self._day_ttl(now), hold, sent=sent)
        except StoreError:
            log.warning("could not settle a quota hold; it lapses by itself", exc_info=True)
        if sent:
            self._seen(now, replace(self.usage, replies=self.usage.replies + 1))

    async def exhaust(self) -> None:
        """Google says the quota is spent: record it so a restart does not ask again today."""
        missing = self.config.daily_units - self.usage.units
        if missing > 0:
            await self.charge(missing, kind="lookup")

    async def follow(self, started: datetime, reading: Reading) -> None:
        """The chat read now (a new start resets the mention count) and how it is read."""
        now = self._clock()
        stamp = f"{started.timestamp():.3f}"
        try:
            await self._store.follow(
                stamp, reading, f"{now.timestamp():.3f}", int(STREAM_TTL.total_seconds())
            )
        except StoreError:
            log.warning("could not record the chat in the quota ledger", exc_info=True)
        old = self.stream
        same = old is not None and old.started == started
        self.stream = StreamView(
            started=started,
            reading=reading,
            mentions=old.mentions if same and old else 0,
            counting_since=old.counting_since if same and old else now,
        )

    # -- the workers: reservations ----------------------------------------------------------------
    async def reserve(self, hold: str, request: Request) -> int:
        """Hold up to ``request.want`` units for a decided turn (0: refused). Atomic."""
        now = self._clock()
        expiry = f"{now.timestamp() + HOLD_SECONDS:.3f}"
        got, units, held = await self._store.reserve(
            quota_day(now), hold, request.want, request.minimum, request.limit,
            f"{request.gap:.3f}", f"{now.timestamp():.3f}", expiry,
            int(STREAM_TTL.total_seconds()),
        )  # fmt: skip
        self._seen(now, replace(self.usage, units=units, held=held))
        return got
