"""The two Lua scripts that follow a ``/link`` alias: whose memory an identity reads, its own or
that of the person it is linked into.

An identity is ``platform`` + the platform's user id. Once linked (``bot.memory.people``), its
alias ``keys.person_of`` names a person id, and the memory lives under the person
(``keys.person_prefix() + person_id + ":memory"``); the identity's own key is no longer used.
Every reader and writer goes through the alias, so a pin learnt on Twitch is the Discord
identity's pin too, and the two stay merged until ``/unlink``.

Why a Lua script on the reply path. The router reads a turn in ONE pipelined round trip
(``bot.state.redis_turn``); following an alias is a read that depends on a read. The
choices were:

* two round trips (``GET`` the alias, then the memory): doubles the turn's reads, for everyone;
* ``GET`` the alias and the own buffer together and follow the alias with a second round trip
  when it is set: one round trip for most users, two for linked ones, plus a race (an
  ``/unlink`` between the two reads);
* compute the memory key from a per-process cache of aliases: every worker must learn of a
  ``/link`` or ``/unlink`` made on another one (a pub/sub invalidation, and a window in which
  a stale alias reads -- or the insights agent writes -- the wrong buffer);
* a script that reads the alias and the buffer it names as ONE command, atomically, inside the
  same pipeline (``LOAD``, sent by ``bot.state.redis_turn``): still one round trip, for
  everyone, never stale.

The script won: it costs its body on the wire (about 200 bytes) and a few microseconds of Lua
in Redis (``bench/identity.py`` measures it against the plain ``GET``: see BENCHMARKS.md).
The scripts name the person's key from the alias's value, which a Redis Cluster refuses (a
script stays within the slot of its keys, and a person's keys hash elsewhere than an
identity's): there the turn's read sends the alias and the own buffer and follows a set alias
in a second round trip (``bot.state.redis_turn``), and a write goes through ``SAVE_OWN`` below
and, for a linked identity, the person's slot (``bot.state.people_cluster``).

Activity keeps a link alive in the same script: the reply path's read of a linked identity
refreshes its alias, the person's memory and its member set (``EXPIRE``, which never creates a
key). Not in the turn's write, which the claim runs inside its own Lua script
(bot/state/claims.py), where a script cannot be called. A member identity that stays silent for
CHORUS_MEMORY_TTL loses its alias like any inactive user loses their memory; the person (and
its other identities) keeps what it knows.

They live in ``bot.state`` beside the people store (``bot.state.people``) that sends them
outside a turn and the turn store (``bot.state.redis_turn``) that sends ``LOAD`` in every
answered message's read.
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

# KEYS: the alias, the identity's own memory (one slot). ARGV: the buffer JSON ("" to delete),
# the TTL in seconds. -> the person id ("": not linked, the own buffer written). ``SAVE`` on a
# Redis Cluster: a linked identity's write goes on to the person's slot.
SAVE_OWN = """
local p = redis.call('GET', KEYS[1])
if p then return p end
if ARGV[1] == '' then redis.call('DEL', KEYS[2]) else
  redis.call('SET', KEYS[2], ARGV[1], 'EX', tonumber(ARGV[2]))
end
return ''
"""
