"""Operations: structured logs that never print a secret, Prometheus metrics, the health and
readiness server, the asyncio helpers every long-running task relies on, and the model calls
outside a turn held to the daily cost cap (``model_calls``).

May import: ``bot.events``, ``bot.state``, ``bot.llm`` and ``bot.settings``. Everything else may
import it.
"""
