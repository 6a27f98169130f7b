"""The router: inbound message -> dedupe -> command or agent turn -> reply -> history.

``core`` is the one path every message takes (claims, memory, the agent, the reply and its
commit); ``record`` is a turn's two round trips (the claim and reads; what an answered turn
writes down inside its commit: history lines, activity, the insights job); ``flow`` bounds the
turns in flight and keeps the books of a graceful shutdown; ``housekeeping`` applies deletions
and moves poison messages to the dead letters; ``texts`` renders the router's own refusal and
apologies; ``text_commands`` answers ``/help`` and ``/reset`` without a model call, and
``memory_commands`` adds ``/pins``, ``/remember``, ``/forget`` and ``/timezone``;
``safety_hooks`` is where the message path meets the safety gate (``bot.safety``) and
``safety_commands`` adds ``/usage`` and the moderators' ``/block``, ``/unblock``, ``/allow``
and ``/disallow``.

May import every other core package (bus, state, memory, live, agent, safety, ops, settings) and
``prompts``; only the composition root (``bot.cli``, ``bot.app``) imports it.
"""
