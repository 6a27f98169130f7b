"""Safety: what the bot refuses to read or say, who it ignores, and how much anyone can make it
spend, with an audit trail of every decision.

``rules`` (pure: normalising, word lists, patterns, links, personal data, injection phrases),
``policy`` (the presets and ``Policies.safety_for(conversation)``, the one place a scope's rules
are decided), ``canary`` (the system prompt's canary and the verbatim-leak check), ``moderator``
(the optional moderation model), ``users`` (block and allow lists), ``audit`` (the bounded
stream and counters), ``texts`` (what it says) and ``gate`` (the calls the router's stages make:
``bot/router/screen.py``, ``decide.py``, ``answer.py``, ``commit.py``). The composition root
builds it.

May import the foundation, ``bot.llm`` (the moderation model, prices), ``bot.state`` (keys),
``bot.ops`` (metrics) and ``bot.quota`` (the per-user and per-channel quotas and the cost cap it
enforces).
"""
