"""The background insights agent: it learns about users from their own words, off the reply path.

After each answered turn the router enqueues a job for the speaker (``bot.memory.insight_queue``; the
core never imports this package). A burst of turns is debounced into one job per user. The
worker (``insights.worker``; in process by default, ``chorus insights`` as its own process)
claims due jobs under a lease, asks a cheap model (CHORUS_INSIGHTS_MODEL) for structured
proposals (``insights.analyse``), keeps only those sourced from the user's own lines, and merges
them into the user's buffer (``insights.merge``) within a daily token budget
(``insights.budget``).
"""
