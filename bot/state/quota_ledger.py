"""The quota ledger as the store holds it: one project's day hash, its holds and its stream hash,
and the Lua scripts that change them atomically.

What the numbers mean -- a reservation per decided turn, charges before each call, settling
after a reply, the plan they feed -- is ``bot.quota.ledger``'s; this module owns the keys
(``bot.state.keys``: ``quota``, ``quota_holds``, ``quota_stream``) and the commands, so every
process's ledger sees one count. Why scripts: a reservation checks spent + held + wanted
against the plan's limit and holds what it got in one step, or two workers reading the same
"enough left" would both take it; an insert moves units from its hold to the spend the same way.
"""

from __future__ import annotations

from bot.state import keys
from bot.state.connect import Client

# Shared by the scripts: drop lapsed holds, sum the others (``skip`` excluded).
HELD_UNITS = """
local function held(now, skip)
  local total = 0
  local all = redis.call('HGETALL', KEYS[2])
  for i = 1, #all, 2 do
    local units, expiry = string.match(all[i + 1], '^(%S+) (%S+)$')
    if tonumber(expiry) <= now then
      redis.call('HDEL', KEYS[2], all[i])
    elseif all[i] ~= skip then
      total = total + tonumber(units)
    end
  end
  return total
end
local function field(key, name)
  return tonumber(redis.call('HGET', key, name) or '0')
end
"""
# KEYS: day, holds, stream. ARGV: hold, want, minimum, limit, gap, now, expiry, ttl
RESERVE = (
    HELD_UNITS
    + """
local now, gap = tonumber(ARGV[6]), tonumber(ARGV[5])
local h, units = held(now, ARGV[1]), field(KEYS[1], 'units')
if gap >= 0 then
  local last = redis.call('HGET', KEYS[3], 'unprompted')
  if last and now - tonumber(last) < gap then return {0, units, h} end
end
local got = math.min(tonumber(ARGV[2]), tonumber(ARGV[4]) - units - h)
if got < tonumber(ARGV[3]) then return {0, units, h} end
redis.call('HSET', KEYS[2], ARGV[1], got .. ' ' .. ARGV[7])
redis.call('EXPIRE', KEYS[2], ARGV[8])
if gap >= 0 then
  redis.call('HSET', KEYS[3], 'unprompted', ARGV[6])
  redis.call('EXPIRE', KEYS[3], ARGV[8])
end
return {got, units, h + got}
"""
)
# KEYS: day, holds, stream. ARGV: hold, cost, limit, daily, now, day_ttl
# -> {outcome (1 sent, 0 beyond the reply budget, -1 the day is spent), units, inserts, held}
INSERT = (
    HELD_UNITS
    + """
local now, cost = tonumber(ARGV[5]), tonumber(ARGV[2])
local others, units = held(now, ARGV[1]), field(KEYS[1], 'units')
local own, expiry = 0, nil
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if raw then
  local u, e = string.match(raw, '^(%S+) (%S+)$')
  if tonumber(e) > now then own, expiry = tonumber(u), e end
end
local inserts = field(KEYS[1], 'inserts')
if units + cost > tonumber(ARGV[4]) then return {-1, units, inserts, others + own} end
if own < cost and units + others + cost > tonumber(ARGV[3]) then
  return {0, units, inserts, others + own}
end
own = math.max(0, own - cost)
if expiry then redis.call('HSET', KEYS[2], ARGV[1], own .. ' ' .. expiry) end
units = redis.call('HINCRBY', KEYS[1], 'units', cost)
inserts = redis.call('HINCRBY', KEYS[1], 'inserts', 1)
redis.call('HINCRBY', KEYS[1], 'reply', cost)
redis.call('EXPIRE', KEYS[1], ARGV[6])
return {1, units, inserts, others + own}
"""
)
# KEYS: stream. ARGV: started, reading, now, ttl
FOLLOW = """
if redis.call('HGET', KEYS[1], 'started') ~= ARGV[1] then
  redis.call('HSET', KEYS[1], 'started', ARGV[1], 'since', ARGV[3], 'mentions', 0)
end
redis.call('HSET', KEYS[1], 'reading', ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[4])
return 1
"""


class LedgerStore:
    """One project's ledger keys over a store client. Times are epoch seconds; ``day`` is the
    quota day's id; each write sets the TTL it is given."""

    def __init__(self, redis: Client, *, platform: str, project: str) -> None:
        self._redis = redis
        self._platform, self._project = platform, project
        self.holds = keys.quota_holds(platform, project)
        self.stream = keys.quota_stream(platform, project)

    def day_key(self, day: str) -> str:
        return keys.quota(self._platform, self._project, day)

    async def read(
        self, day: str, *, add_mentions: int = 0, stream_ttl: int = 0
    ) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
        """The day hash, the holds and the stream hash, in one round trip (first adding
        ``add_mentions`` mentions seen to the stream)."""
        async with self._redis.pipeline(transaction=True) as pipe:
            if add_mentions:
                pipe.hincrby(self.stream, "mentions", add_mentions)
                pipe.expire(self.stream, stream_ttl)
            pipe.hgetall(self.day_key(day))
            pipe.hgetall(self.holds)
            pipe.hgetall(self.stream)
            results = await pipe.execute()
        day_hash, holds, stream = results[-3:]
        return day_hash, holds, stream

    async def charge(self, day: str, ttl: int, units: int, kind: str) -> tuple[int, int]:
        """Add ``units`` to the day (and to ``kind``'s count): (units, inserts) after."""
        key = self.day_key(day)
        async with self._redis.pipeline(transaction=True) as pipe:
            pipe.hincrby(key, "units", units)
            pipe.hincrby(key, kind, units)
            pipe.hincrby(key, "inserts", 0)
            pipe.expire(key, ttl)
            total, _, inserts, _ = await pipe.execute()
        return int(total), int(inserts)

    async def charge_insert(
        self, day: str, ttl: int, hold: str, cost: int, limit: int, daily: int, now: float
    ) -> tuple[int, int, int, int]:
        """One reply piece (``INSERT``): (outcome, units, inserts, held)."""
        outcome, units, inserts, held = await self._redis.eval(
            INSERT, 3, self.day_key(day), self.holds, self.stream,
            hold, cost, limit, daily, now, ttl,
        )  # fmt: skip
        return int(outcome), int(units), int(inserts), int(held)

    async def settle(self, day: str, ttl: int, hold: str | None, *, sent: bool) -> None:
        """Release ``hold``; a sent reply counts towards the day's replies."""
        async with self._redis.pipeline(transaction=True) as pipe:
            if hold:
                pipe.hdel(self.holds, hold)
            if sent:
                pipe.hincrby(self.day_key(day), "replies", 1)
                pipe.expire(self.day_key(day), ttl)
            await pipe.execute()

    async def follow(self, started: str, reading: str, now: str, ttl: int) -> None:
        """The chat read now and how (``FOLLOW``)."""
        await self._redis.eval(FOLLOW, 1, self.stream, started, reading, now, ttl)

    async def reserve(
        self,
        day: str,
        hold: str,
        want: int,
        minimum: int,
        limit: int,
        gap: str,
        now: str,
        expiry: str,
        ttl: int,
    ) -> tuple[int, int, int]:
        """A turn's hold (``RESERVE``): (units got, the day's units, held)."""
        got, units, held = await self._redis.eval(
            RESERVE, 3, self.day_key(day), self.holds, self.stream,
            hold, want, minimum, limit, gap, now, expiry, ttl,
        )  # fmt: skip
        return int(got), int(units), int(held)
