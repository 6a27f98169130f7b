"""The deployment's model spend of each UTC day, shared in Redis by every process: what is
spent, and what is reserved for model calls in flight.

Why reservations: the daily cost cap (CHORUS_QUOTA_COST_USD_DAY) can only be kept if a call's
cost is counted *before* the call. A cap checked against the recorded spend alone admits every
turn that starts before the first one is recorded (eight simultaneous mentions, eight model
calls under a cap one answer exhausts). So a model call first **reserves** its estimated cost: a
hold, admitted only while spent + held stays under the cap, in one Lua script (the check and the
hold are one atomic step across every worker). When the call is done the hold is **settled** (removed, and
the real cost added to the spend, atomically) or **released** (removed) when it failed. A hold
nobody settles (its process died) lapses after ``HOLD_SECONDS``, like the YouTube ledger's
(``bot.quota.ledger``).

The reply path reserves in its quota admission (``bot.quota.users``: ``HELD`` is shared with
that script) and settles in the turn's one commit (``bot.state.turn.CostSettle``), its
moderation calls included; the calls outside a turn (insights, summaries, embeddings) reserve
and settle here, through ``bot.ops.model_calls``.

Keys (``bot.state.keys``): ``usage_cost`` (integer micro-USD spent that day) and
``usage_cost_holds`` (hash: hold id -> ``"<micro-USD> <epoch expiry>"``); both expire an hour
after their day. A reservation counts against the day it was made on, and is settled there.
"""

from __future__ import annotations

from collections.abc import Awaitable
from datetime import UTC, datetime, timedelta
from typing import NamedTuple, cast

from bot.state import keys
from bot.state.client import Pipeline, Redis
from bot.state.turn import CostSettle

MICRO = 1_000_000  # amounts are integer micro-USD
HOLD_SECONDS = 900  # a reservation nobody settles lapses after this
DAY_GRACE = 3600  # seconds a day's keys outlive it

# Lua shared by the scripts that reserve: the live holds of KEYS-key ``key`` (lapsed ones are
# dropped), ``skip`` excluded (the hold being made again: a redelivered message).
HELD = """
local function held(key, now, skip)
  local total = 0
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local amount, expiry = string.match(all[i + 1], '^(%S+) (%S+)$')
    if (not expiry) or tonumber(expiry) <= now then
      redis.call('HDEL', key, all[i])
    elseif all[i] ~= skip then
      total = total + tonumber(amount)
    end
  end
  return total
end
"""

# KEYS: spent, holds. ARGV: hold, amount, cap, now, expiry, ttl -> {granted 1|0, spent, held}
RESERVE = (
    HELD
    + """
local now = tonumber(ARGV[4])
local holding = held(KEYS[2], now, ARGV[1])
local spent = tonumber(redis.call('GET', KEYS[1]) or '0')
if spent + holding >= tonumber(ARGV[3]) then return {0, spent, holding} end
local amount = tonumber(ARGV[2])
if amount > 0 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2] .. ' ' .. ARGV[5])
  redis.call('EXPIRE', KEYS[2], tonumber(ARGV[6]))
end
return {1, spent, holding + amount}
"""
)


def cost_day(now: datetime) -> tuple[str, int]:
    """The UTC day of ``now`` (``YYYYMMDD``) and the seconds left in it."""
    now = now.astimezone(UTC)
    end = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    return f"{now:%Y%m%d}", max(1, int((end - now).total_seconds()))


def micro(usd: float | None) -> int:
    """``usd`` in integer micro-USD (a cost above zero is at least 1)."""
    if not usd or usd <= 0:
        return 0
    return max(1, round(usd * MICRO))


class Reservation(NamedTuple):
    """A hold of ``amount`` micro-USD, made (or to be made) on ``day`` under id ``hold``. (A
    named tuple: its class costs a fraction of a dataclass's to create at import.)"""

    day: str
    hold: str
    amount: int
    expiry: float  # epoch seconds
    ttl: int  # seconds the day's keys live from now


class Spent(NamedTuple):
    """A day's spend and live reservations, in micro-USD."""

    spent: int
    held: int


class CostLedger:
    """The spend and reservations of one deployment (its bus namespace)."""

    def __init__(self, redis: Redis, namespace: str = "main") -> None:
        self.redis = redis
        self.namespace = namespace

    def keys(self, day: str) -> tuple[str, str]:
        """(spent, holds) of ``day``."""
        return keys.usage_cost(day, self.namespace), keys.usage_cost_holds(day, self.namespace)

    def reservation(self, hold: str, amount: int, now: datetime) -> Reservation:
        """What reserving ``amount`` under ``hold`` at ``now`` would hold."""
        day, left = cost_day(now)
        return Reservation(day, hold, amount, now.timestamp() + HOLD_SECONDS, left + DAY_GRACE)

    async def reserve(self, reservation: Reservation, cap: int, now: datetime) -> bool:
        """Hold ``reservation`` unless the day's spend and holds have reached ``cap`` (micro-USD);
        whether it was admitted. Atomic."""
        spent, holds = self.keys(reservation.day)
        run = cast(
            "Awaitable[list[int]]",
            self.redis.eval(
                RESERVE, 2, spent, holds, reservation.hold, reservation.amount, cap,
                f"{now.timestamp():.3f}", f"{reservation.expiry:.3f}", reservation.ttl,
            ),
        )  # fmt: skip
        granted, _, _ = await run
        return bool(int(granted))

    def settle_change(self, reservation: Reservation, cost: int) -> CostSettle:
        """Settling ``reservation`` at ``cost`` micro-USD, as a change of a turn's commit."""
        spent, holds = self.keys(reservation.day)
        return CostSettle(spent, holds, reservation.hold, cost, reservation.ttl)

    async def settle(self, reservation: Reservation, cost: int) -> None:
        """The call is done: its hold goes, ``cost`` micro-USD is spent. Atomic."""
        async with self.redis.pipeline(transaction=True) as pipe:
            queue_settle(pipe, self.settle_change(reservation, cost))
            await pipe.execute()

    async def release(self, reservation: Reservation) -> None:
        """The call was not made or failed: its hold goes, nothing is spent."""
        await self.settle(reservation, 0)

    async def today(self, now: datetime) -> Spent:
        """The spend and the live holds of ``now``'s day (lapsed holds not counted)."""
        spent_key, holds_key = self.keys(cost_day(now)[0])
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(spent_key)
            pipe.hvals(holds_key)
            spent, holds = await pipe.execute()
        held = 0
        for value in cast("list[str]", holds or []):
            amount, _, expiry = str(value).partition(" ")
            if expiry and float(expiry) > now.timestamp():
                held += int(amount)
        return Spent(int(spent or 0), held)


def queue_settle(pipe: Pipeline, settle: CostSettle) -> None:
    """The commands of ``settle``, queued on ``pipe`` (a transaction, or a turn's commit)."""
    pipe.hdel(settle.holds_key, settle.hold)
    if settle.amount > 0:
        pipe.incrby(settle.spent_key, settle.amount)
        pipe.expire(settle.spent_key, settle.ttl_seconds)
