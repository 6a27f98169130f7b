"""Live chat: when the bot speaks in a busy Twitch, YouTube or ambient channel, and to whom.

``engagement`` is the pure policy (no I/O, no clock but the one it is given), ``ledger`` its
data types and per-channel state, ``send_limits`` each platform's outbound rate limit;
``budget`` gates the turns of a platform whose replies cost quota (YouTube) on the reply budget
of ``bot.quota``; ``turns`` wires the policy to the router's turns; ``store`` and ``durable``
keep what must outlive the process (the pause, cooldowns, answered messages) in Redis;
``replay`` (with ``replay_quota`` and ``replay_report``) runs a recorded chat trace through the
policy offline (``chorus replay``).

May import: ``bot.events``, ``bot.state``, ``bot.ops``, ``bot.quota``, ``bot.settings`` and
``prompts`` (like ``bot.memory``, it owns a Redis store whose keys ``bot.state.keys`` builds).
The policy modules (``engagement``, ``ledger``, ``send_limits``, ``budget``, ``replay*``) import
no I/O at all. The router imports this package, never the reverse.
"""
