"""State: the Redis connection (real or embedded), every key name, conversation history, and
riding over a Redis outage.

Owns nothing but storage concerns: ``connect`` opens a client from ``CHORUS_REDIS_URL``
(``memory://`` is the embedded in-process twin), ``keys`` builds every key Chorus uses,
``history`` keeps one capped list per conversation, ``outages`` retries a Redis step until the
server answers again.

May import: ``bot.events``, ``bot.resilience``, ``bot.settings``. Nothing above it.
"""
