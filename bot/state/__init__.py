"""State: everything Chorus keeps, and the seam a turn reads and records it through.

``turn`` is the seam: what one turn reads (``TurnQuery`` -> ``TurnState``) and leaves behind
(``TurnChanges``), as typed values each owner fills in, and the ``TurnStore`` that does both in
two round trips; ``redis_turn`` is it over Redis and ``memory_turn`` its in-memory twin, held to
one contract (tests/test_turn_store_contract.py). ``claims`` makes every answer exactly once on
either. ``connect`` opens a client from ``CHORUS_REDIS_URL`` (``embedded://``, the default, is the
embedded in-process store kept on disk by ``embedded`` and ``statefile``; ``memory://`` the same
forgotten at exit; ``copy`` moves its keys to a Redis server), ``keys`` builds every key Chorus uses, ``history`` keeps one capped list per
conversation, ``engagement`` the live channels' durable state, ``draft_messages`` where streamed
answers' messages are, ``turnlog`` the admin dashboard's records, ``cost`` the day's model
spend and the reservations of the calls in flight (the daily cost cap), ``outages`` retries a
step until the server answers again.

May import: ``bot.events``, ``bot.resilience``, ``bot.settings``. Nothing above it.
"""
