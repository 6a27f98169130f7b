"""Whose memory an identity reads: its own, or that of the person it is linked into (``/link``).

An identity is ``platform`` + the platform's user id. Once linked (bot/memory/people.py), its
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
in Redis (``bench/identity_read.py`` measures it against the plain ``GET``: see BENCHMARKS.md).
The scripts name the person's key from the alias's value, which a Redis Cluster would refuse;
Chorus runs on one Redis (a primary, with replicas if wanted), like the quota scripts.

Activity keeps a link alive in the same script: the reply path's read of a linked identity
refreshes its alias, the person's memory and its member set (``EXPIRE``, which never creates a
key). Not in the turn's write, which the claim runs inside its own Lua script
(bot/state/claims.py), where a script cannot be called. A member identity that stays silent for
CHORUS_MEMORY_TTL loses its alias like any inactive user loses their memory; the person (and
its other identities) keeps what it knows.
"""

from __future__ import annotations

from redis.asyncio import Redis

from bot.state import keys
from bot.state.alias_scripts import LOAD, SAVE
from bot.state.redis_turn import parse_alias_read

# The scripts live in bot.state.alias_scripts: the embedded store runs LOAD natively.


def memory_key(platform: str, user_id: str, person_id: str | None) -> str:
    """Where the identity's memory lives, given its alias (None: not linked)."""
    return keys.memory(keys.PERSON, person_id) if person_id else keys.memory(platform, user_id)


async def load(redis: Redis, platform: str, user_id: str) -> tuple[str | None, str | None]:
    """``(person id or None, the stored buffer's JSON or None)`` for one identity, in one
    round trip (the ``LOAD`` script the turn's read also sends)."""
    result = await redis.eval(
        LOAD,
        2,
        keys.person_of(platform, user_id),
        keys.memory(platform, user_id),
        keys.person_prefix(),
        0,
    )
    return parse_alias_read(result)


async def save(redis: Redis, platform: str, user_id: str, value: str, ttl_seconds: int) -> None:
    """Store ``value`` (``""``: delete) where the identity's memory lives, in one round trip."""
    await redis.eval(
        SAVE,
        2,
        keys.person_of(platform, user_id),
        keys.memory(platform, user_id),
        keys.person_prefix(),
        value,
        ttl_seconds,
    )
