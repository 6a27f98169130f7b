"""The quota counters as the store holds them, and the one script that admits a message.

The limits, the periods and the refusal a user reads are ``bot.quota.users``'s; this module owns
the counters' commands so that the check and the count are one atomic step: three workers each
reading "19 of 20" must not all answer. ``ADMIT`` reads every counter, and either counts all of
them (+1 message) and holds the turn's estimated cost under the daily cap (``bot.state.cost``),
or returns the first limit reached and whether this is its first refusal of the period.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import cast

from bot.state.connect import Client
from bot.state.cost import HELD

# KEYS: n counters, the cost key, the cost holds, then n + 1 notice keys (one per counter, one
# for the cost). ARGV: n, then (message limit, token limit, ttl) per counter (-1: none), the cost
# cap in micro-USD (-1: none), then n + 1 notice TTLs, then the turn's reservation: hold id,
# amount (micro-USD), now, its expiry, the holds' TTL. Returns {over, first, unit}: over = 0
# (admitted, counted and the cost held), i (counter i reached its limit) or n + 1 (the cost
# cap); first = 1 when this refusal is the first of its period (the notice is due); unit = 1
# messages, 2 tokens.
ADMIT = (
    HELD
    + """
local n = tonumber(ARGV[1])
local over = 0
local unit = 0
for i = 1, n do
  local mlim = tonumber(ARGV[2 + (i - 1) * 3])
  local tlim = tonumber(ARGV[3 + (i - 1) * 3])
  local vals = redis.call('HMGET', KEYS[i], 'm', 't')
  local m = tonumber(vals[1]) or 0
  local t = tonumber(vals[2]) or 0
  if mlim >= 0 and m + 1 > mlim then
    over = i
    unit = 1
    break
  end
  if tlim >= 0 and t >= tlim then
    over = i
    unit = 2
    break
  end
end
local cap = tonumber(ARGV[2 + n * 3])
local r = 2 + n * 3 + n + 1
local hold, want, now = ARGV[r + 1], tonumber(ARGV[r + 2]), tonumber(ARGV[r + 3])
if over == 0 and cap >= 0 then
  local spent = tonumber(redis.call('GET', KEYS[n + 1]) or '0')
  if spent + held(KEYS[n + 2], now, hold) >= cap then over = n + 1 end
end
if over == 0 then
  for i = 1, n do
    redis.call('HINCRBY', KEYS[i], 'm', 1)
    redis.call('EXPIRE', KEYS[i], tonumber(ARGV[4 + (i - 1) * 3]))
  end
  if cap >= 0 and want > 0 then
    redis.call('HSET', KEYS[n + 2], hold, ARGV[r + 2] .. ' ' .. ARGV[r + 4])
    redis.call('EXPIRE', KEYS[n + 2], tonumber(ARGV[r + 5]))
  end
  return {0, 0, 0}
end
local ttl = tonumber(ARGV[2 + n * 3 + over])
local first = redis.call('SET', KEYS[n + 2 + over], '1', 'NX', 'EX', ttl)
if first then return {over, 1, unit} end
return {over, 0, unit}
"""
)


class CounterStore:
    """The per-user, per-channel and cost counters over a store client."""

    def __init__(self, redis: Client) -> None:
        self._redis = redis

    async def admit(
        self, script_keys: Sequence[str], argv: Sequence[int | str]
    ) -> tuple[int, int, int]:
        """Run ``ADMIT`` (its KEYS and ARGV as above): (over, first, unit)."""
        run = cast(
            "Awaitable[list[int]]",
            self._redis.eval(ADMIT, len(script_keys), *script_keys, *argv),
        )
        over, first, unit = (int(v) for v in await run)
        return over, first, unit

    async def add_tokens(self, counters: Sequence[tuple[str, int]], tokens: int) -> None:
        """Add ``tokens`` to each (counter key, ttl) in one round trip: what a model call made
        outside a turn (a plugin's ``ctx.ask``) spent."""
        async with self._redis.pipeline(transaction=True) as pipe:
            for key, ttl in counters:
                pipe.hincrby(key, "t", tokens)
                pipe.expire(key, ttl)
            await pipe.execute()

    async def read(self, counter_keys: Sequence[str]) -> list[tuple[int, int]]:
        """(messages, tokens) of each counter, in one round trip."""
        async with self._redis.pipeline(transaction=False) as pipe:
            for key in counter_keys:
                pipe.hmget(key, "m", "t")
            rows = await pipe.execute()
        return [(int(row[0] or 0), int(row[1] or 0)) for row in rows]
