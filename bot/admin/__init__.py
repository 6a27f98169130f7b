"""The admin dashboard: see and steer Chorus in a browser (``CHORUS_ADMIN_PORT``).

A small aiohttp app with server-rendered Jinja2 pages (the templates are text people read, so
they live in ``prompts/admin/``) and no build step. It reads what it shows from Redis -- the turn
log, the indexes and the timeline the router keeps (bot/state/turnlog.py),
memory, the live channels' durable state, the insights queue, the quota ledger -- so any
process of a deployment can serve it; what only a process knows (its platforms' readiness, its
model chain's breakers) comes from that process. Every change goes through the path the chat
commands use (``/forget``, the live pause keys, the reload) and into the audit trail.

May import: the foundation and the core packages (``bot.state``, ``bot.ops``, ``bot.llm``,
``bot.memory``, ``bot.engagement``, ``bot.quota``, ``bot.safety``, ``bot.router``, and for the
test chat, the plugins and the knowledge pages ``bot.agent``, ``bot.tools``, ``bot.plugins``,
``bot.knowledge``); never an adapter or the insights package.
"""
