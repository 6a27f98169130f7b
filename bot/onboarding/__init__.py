"""``chorus init``: the first-run setup that writes a working ``.env`` and ``chorus.toml``.

Why a package of its own: it is the one part of the CLI that talks to a person rather than to
a deployment (questions, hidden input, re-asking a rejected key) and to the vendors' and
platforms' account endpoints rather than to their chat APIs. ``wizard`` asks (or reads flags),
``checks`` tries each credential with a short timeout, ``files`` writes the two files.

Its questions and messages are for the operator at the terminal, like the CLI's other operator
messages, so they stay in code (``prompts/`` holds what users in a chat and models read).

May import: the foundation and ``bot.llm`` (the real-call guard). The composition root
(``bot/cli.py``) calls it before any other setting is loaded, so a broken ``.env`` can be
replaced by it.
"""
