"""Per-user memory: pins and recommendations, how relevant each is to a message, the volatile
context block that carries them into a prompt, and the queue through which the reply path asks
the insights agent to look at a user; semantic recall (int8 embedding vectors in Redis, the
hybrid score, the query embedding raced against the turn's read) and the knowledge bases'
chunks and their search. (The chat commands that show and edit memory are the
router's: ``bot.router.memory_commands``.)

May import: ``bot.events``, ``bot.state``, ``bot.ops``, ``bot.settings`` and ``prompts``.
The insights agent (the top-level ``insights`` package) builds on this package; this package
never imports it.
"""
