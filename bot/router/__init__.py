"""The router: each inbound message through the stages of a turn, to one reply, exactly once.

    admit -> screen -> read -> decide -> answer -> commit

One module per stage, each with typed input and output: ``admit`` (a delivery becomes a turn or
is dropped: dead letters, scope routing, the live-chat decision), ``screen`` (the safety gate's
first look), ``read`` (the claim and the turn's one read, ``bot.state.turn``), ``decide`` (the
reply budget, fixed answers, text commands, the safety gate before the model), ``answer`` (the
prompt, the agent, the outbound check), ``commit`` (the reply and what the turn leaves behind,
in one step guarded by the claim). ``core`` sequences them per conversation and keeps the books
of the turns in flight (``flow``: the bound on them and a graceful stop); ``build`` wires the
stages from their parts; ``items`` is the unit of work they pass along; ``observe`` writes down
what they decided (the turn log).

Beside the path: ``scoping`` (each message's profile from chorus.toml's scopes), ``drafts``
(streamed answers), ``housekeeping`` (deletions, dead letters), ``texts`` (the router's own
refusals and apologies), and the chat commands: ``text_commands`` (``/help``, ``/reset``),
``memory_commands`` (``/pins``, ``/remember``, ``/forget``, ``/timezone``), ``link_commands``
(``/link``, ``/unlink``) and ``safety_commands`` (``/usage`` and the moderators' ``/block``,
``/unblock``, ``/allow``, ``/disallow``).

May import every other core package (bus, state, memory, engagement, agent, safety, ops,
settings) and ``prompts``; only the composition root (``bot.cli``, ``bot.app``) imports it.
"""
