"""Operations: structured logs that never print a secret, Prometheus metrics, the health and
readiness server, and the asyncio helpers every long-running task relies on.

May import: ``bot.events``, ``bot.state`` and ``bot.settings``. Everything else may import it.
"""
