"""What the core offers platform adapters: the ``PlatformAdapter`` protocol the composition
root runs, the supervisor that keeps each adapter running (restarts, failures, readiness), and
the text splitter every platform uses to fit its message-size limit.

May import: ``bot.events``, ``bot.resilience`` and ``bot.settings``. Adapters import it; the
core never imports an adapter.
"""
