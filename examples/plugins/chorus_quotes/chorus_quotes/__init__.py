"""A quote book for Chorus: ``/quote add TEXT``, ``/quote``, ``/quote N``, ``/quote count``.

An example of a plugin's settings (``QuoteSettings``, ``[plugins.quotes]`` in ``chorus.toml``,
overridable per scope) and storage (``ctx.store.channel``: one list per channel, in Redis or the
embedded store like the rest of the bot's data). Each quote is pushed with its author as
``owner``, so that author's ``/forget`` removes it and nobody else's.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, Field

from bot.plugins import CommandContext, command, settings

BOOK = "book"  # the channel's list of quotes
_random = random.SystemRandom()


@settings
class QuoteSettings(BaseModel):
    """``[plugins.quotes]``."""

    max_quotes: int = Field(default=500, ge=1, le=10_000)  # per channel; the oldest go
    max_length: int = Field(default=300, ge=10, le=2_000)  # characters per quote
    show_author: bool = True  # "(added by NAME)" after a quote


@command(name="quote", summary="The quote book: /quote, /quote 3, /quote add TEXT, /quote count")
async def quote(ctx: CommandContext) -> str:
    """Add a quote to this channel's book, or show one."""
    config = ctx.settings(QuoteSettings)
    book = ctx.store.channel
    verb, _, rest = ctx.args.strip().partition(" ")
    if verb.lower() == "add":
        text = rest.strip()
        if not text:
            return "Write the quote after /quote add."
        if len(text) > config.max_length:
            return f"That quote is too long ({len(text)} characters; at most {config.max_length})."
        entry = {"text": text, "by": ctx.message.author.display_name}
        count = await book.push(BOOK, entry, owner=ctx.user, max_len=config.max_quotes)
        return f"Added quote #{count}."
    quotes = await book.values(BOOK)
    if verb.lower() == "count":
        return f"{len(quotes)} quote{'s' if len(quotes) != 1 else ''} here."
    if not quotes:
        return "No quotes here yet: add one with /quote add TEXT."
    if verb.isdigit():
        number = int(verb)
        if not 1 <= number <= len(quotes):
            return f"There is no quote #{number} (1 to {len(quotes)})."
    elif verb:
        return "Use /quote, /quote NUMBER, /quote add TEXT or /quote count."
    else:
        number = _random.randint(1, len(quotes))
    chosen = quotes[number - 1]
    author = f" (added by {chosen['by']})" if config.show_author else ""
    return f'#{number}: "{chosen["text"]}"{author}'
