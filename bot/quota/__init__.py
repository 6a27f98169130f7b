"""Platform API quotas that replies are paid from: the plan, the quota day, the shared ledger.

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
  process of a deployment, with an in-memory twin for the offline replay.

May import: ``bot.events``, ``bot.settings``, ``bot.state`` and ``bot.ops``. Imported by the
YouTube adapter, ``bot.live`` (the gate of the live-chat turns), the router and the app.
"""
