"""Live chat: when the bot speaks in a busy Twitch, YouTube or ambient channel, and to whom.

``engagement`` is the pure policy (no I/O, no clock but the one it is given), ``ledger`` its
data types and per-channel state, ``send_limits`` each platform's outbound budget; ``turns``
wires the policy to the router's turns; ``replay`` runs a recorded chat trace through the policy
offline (``chorus replay``).

May import: ``bot.events``, ``bot.ops``, ``bot.settings`` and ``prompts``. The router imports
this package, never the reverse.
"""
