"""The knowledge base's moving parts: indexing the operator's files and URLs, the
``search_knowledge`` tool, and wiring semantic recall into the app.

The chunks, their store and their search are ``bot.memory.knowledge``; the reply path's use of
them is ``bot.memory.recall``. This package holds what needs more than memory may import: the
SSRF-guarded fetcher and the tool protocol (``bot.tools``), the embedding SDKs (``bot.llm``).
May import the foundation, ``bot.state``, ``bot.ops``, ``bot.llm``, ``bot.tools`` and
``bot.memory``.
"""
