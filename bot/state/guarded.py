"""The guarded-commit script: run some commands only while a key still holds a token.

Its users are the claims' commit, renewal and release (``bot.state.redis_turn``) and the Twitch
conduits' records (``bot.state.conduits``), so it is a module of its own beside them.
"""

from __future__ import annotations

# KEYS[1] the claim; ARGV[1] our token, then each command as its argument count and arguments.
GUARDED = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
local i = 2
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + n))
  i = i + n + 1
end
return 1
"""
