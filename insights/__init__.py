"""The background insights agent: it learns about users from their own words, off the reply path.

After each answered turn the router asks for a job for the speaker (``bot.memory.insight_queue``,
riding the turn's commit; the core never imports this package). A burst of turns is debounced
into one job per user. The worker (``insights.worker``; in process by default, ``chorus
insights`` as its own process) claims due jobs under a lease (the queue and the daily token
budgets are ``bot.state.insight_jobs``), asks a cheap model (CHORUS_INSIGHTS_MODEL) for
structured proposals (``insights.analyse``), keeps only those sourced from the user's own
lines, and merges them into the user's buffer (``insights.merge``). Conversation summaries and
community notes are ``insights.summariser``'s.
"""
