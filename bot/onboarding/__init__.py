"""``chorus init``: the first-run setup that writes a working ``.env`` and ``chorus.toml``; and
``chorus auth``: the OAuth sign-in of the bot's Twitch or YouTube account.

Why a package of its own: it is the one part of the CLI that talks to a person rather than to
a deployment (questions, hidden input, re-asking a rejected key) and to the vendors' and
platforms' account endpoints rather than to their chat APIs. ``wizard`` asks (or reads flags),
``checks`` tries each credential with a short timeout, ``files`` writes the two files (and
updates ``.env`` for ``auth``), ``finish`` prints what is left to do (``discord_app``: the
invite and the Message Content intent). ``auth`` runs ``twitch_auth`` (the device code flow) or
``youtube_auth`` (the installed-app flow with PKCE) and stores the tokens.

The questions and the one-line errors stay in code, like the CLI's other operator messages; the
longer guidance they print (the invite, the intent, the sign-in steps, the closing lines) lives
in ``prompts/onboarding/``.

May import: the foundation and ``bot.llm`` (the real-call guard). The composition root
(``bot/cli.py``) calls it before any other setting is loaded, so a broken ``.env`` can be
replaced by it.
"""
