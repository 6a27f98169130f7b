"""The guarded-commit script: run some commands only while a key still holds a token.

It lives in ``bot.state`` (not with the claims that use it) because the embedded store
(``bot.state.embedded``) recognises this exact script and runs it natively, and ``bot.state``
may not import ``bot.bus``.
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
