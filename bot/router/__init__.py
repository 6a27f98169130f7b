"""The router: inbound message -> dedupe -> command or agent turn -> reply -> history.

``core`` is the one path every message takes (claims, memory, the agent, the reply and its
commit); ``record`` is what an answered turn writes down inside that commit (history lines,
activity, the insights job); ``text_commands`` answers ``/help`` and ``/reset`` without a model
call, and ``memory_commands`` adds ``/pins``, ``/remember``, ``/forget`` and ``/timezone``.

May import every other core package (bus, state, memory, live, agent, ops, settings) and
``prompts``; only the composition root (``bot.cli``, ``bot.app``) imports it.
"""
