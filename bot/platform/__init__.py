"""What the core offers platform adapters: the ``PlatformAdapter`` protocol the composition
root runs, and the text splitter every platform uses to fit its message-size limit.

May import: ``bot.events``. Adapters import it; the core never imports an adapter.
"""
