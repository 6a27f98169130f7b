"""The bus: how events travel between adapters, the router and the workers.

Owns the ``EventBus`` protocol and its two implementations (``base.InProcessBus`` for one
process, ``streams.RedisStreamsBus`` for many, its publishing half in ``streams_publish``), the
topic names, partition leases, the claim protocol that makes each inbound message answered
exactly once (``claims``), and the gateway's ordered outbox with its on-disk spool
(``outbox``, ``spool``: a conversation's messages reach Redis in arrival order through any
outage, and what a stopping gateway still holds is kept for its next start). What the Streams
bus keeps is bounded in time (``retention``) and erased per user on ``/forget`` (``erasure``).

May import: ``bot.events``, ``bot.resilience``, ``bot.state`` (keys, outage riding) and
``bot.ops``. Never the router, the agent, an adapter or ``insights``: everything above the bus
depends on it, not the other way round.
"""
