"""Every quota Chorus keeps: what a user or a channel may spend, and the platform API quotas that
replies are paid from.

Why its own package: a YouTube reply costs quota units (``liveChatMessages.insert``, 50 each)
from the same small daily budget that reading the chat needs. Two sides spend that budget: the
gateway (the YouTube adapter reads the chat and sends the replies) and the workers (the live-chat
policy decides which turns to run at all). Both must plan with the SAME arithmetic and see the
SAME ledger, but the core never imports an adapter and the adapter never imports the live-chat
policy, so the shared part lives here, below both:

- ``day``: the quota day (midnight Pacific) and its reset;
- ``plan``: the pure planner -- what reading must keep so it never stops before the reset,
  the reserve for mentions, what is left for room batches and idle lines and how to pace them,
  and the reading cadence (polls, stream reconnects) it implies;
- ``ledger``: the day's spend and the replies in flight ("holds"), in Redis, shared by every
  process of a deployment, with an in-memory twin (``view``) for the offline replay;
- ``gate``: the reply-budget gate the live-chat turns of a quota-paid platform pass before the
  model runs, and ``replay`` its twin for ``chorus replay``;
- ``users``: the per-user and per-channel message and token quotas and the deployment's daily
  cost cap (one Lua step per admitted turn), which ``bot.safety``'s gate enforces.

May import: ``bot.events``, ``bot.settings``, ``bot.state`` and ``bot.ops``. Imported by the
YouTube adapter, ``bot.engagement`` (the live-chat turns), ``bot.safety``, the router and the app.
"""
