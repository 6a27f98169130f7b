"""The bus: how events travel between adapters, the router and the workers.

Owns the ``EventBus`` protocol and its two implementations (``base.InProcessBus`` for one
process, ``streams.RedisStreamsBus`` for many, its publishing half in ``streams_publish``), the
topic names, partition leases, and the claim protocol that makes each inbound message answered
exactly once (``claims``). What the Streams bus keeps is bounded in time (``retention``) and
erased per user on ``/forget`` (``erasure``).

May import: ``bot.events``, ``bot.resilience``, ``bot.state`` (keys, outage riding) and
``bot.ops``. Never the router, the agent, an adapter or ``insights``: everything above the bus
depends on it, not the other way round.
"""
