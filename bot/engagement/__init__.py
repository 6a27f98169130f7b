"""Engagement: when the bot speaks in a busy live chat (Twitch, YouTube, an ambient channel), and
to whom.

``policy`` is the pure decision (no I/O, no clock but the one it is given), ``ledger`` its
data types and per-channel state, ``cooldowns`` the per-user credit, ``send_limits`` each
platform's outbound rate limit; ``turns`` wires the policy to the router's turns (batches, idle
lines, pause and resume) and passes quota-paid turns through ``bot.quota.gate``; ``thanks``
batches stream events (subs, raids, cheers, Super Chats) into thanks; ``store`` and ``durable``
keep what must outlive the process (the pause, cooldowns, answered messages) in Redis;
``replay`` (with ``replay_report``) runs a recorded chat trace through the policy offline
(``chorus replay``).

May import: ``bot.events``, ``bot.state``, ``bot.ops``, ``bot.quota``, ``bot.settings`` and
``prompts`` (like ``bot.memory``, it owns a Redis store whose keys ``bot.state.keys`` builds).
The policy modules (``policy``, ``ledger``, ``cooldowns``, ``send_limits``, ``replay*``) import
no I/O at all. The router imports this package, never the reverse.
"""
