"""The two Lua scripts that follow a ``/link`` alias (bot/memory/aliases.py says why a script).

They live in ``bot.state`` because the embedded store (``bot.state.embedded``) recognises
``LOAD`` -- on every answered message's read -- by its exact text and runs it natively, and
``bot.state`` may not import ``bot.memory``.
"""

from __future__ import annotations

# KEYS: the alias, the identity's own memory. ARGV: the person prefix, a TTL in seconds (0: none).
# -> {person id or "", the buffer JSON or false}. A linked identity's read on the reply path
# also keeps the link alive (the alias, the person's buffer and member set): EXPIRE never creates.
LOAD = """
local p = redis.call('GET', KEYS[1])
if p then
  local ttl = tonumber(ARGV[2])
  if ttl > 0 then
    redis.call('EXPIRE', KEYS[1], ttl)
    redis.call('EXPIRE', ARGV[1] .. p .. ':members', ttl)
    redis.call('EXPIRE', ARGV[1] .. p .. ':memory', ttl)
  end
  return {p, redis.call('GET', ARGV[1] .. p .. ':memory')}
end
return {'', redis.call('GET', KEYS[2])}
"""

# KEYS: the alias, the identity's own memory. ARGV: the person prefix, the buffer JSON ("" to
# delete), the TTL in seconds. An unconditional write (``MemoryStore.save``) in one round trip.
SAVE = """
local p = redis.call('GET', KEYS[1])
local key = KEYS[2]
if p then key = ARGV[1] .. p .. ':memory' end
if ARGV[2] == '' then return redis.call('DEL', key) end
redis.call('SET', key, ARGV[2], 'EX', tonumber(ARGV[3]))
return 1
"""
