"""Welcome and remind: an example of an event (``@on_message``), a timer (``@every``) and
sending (``ctx.reply``, ``ctx.send``), with settings (``[plugins.welcome]``) and storage.

Reminders are kept in the store under the firing of the timer that is due to send them
(``due:<instant>``, a list), always a firing still to come; each firing sends what is due up to
its instant and deletes it. A timer's firing runs once across all workers, so a reminder is sent
once, whichever worker holds it, and survives a restart.
"""

from __future__ import annotations

import math
import re
import time

from pydantic import BaseModel, Field

from bot.plugins import (
    CommandContext,
    ConversationKey,
    EventContext,
    TimerContext,
    command,
    every,
    on_message,
    settings,
)

TICK_SECONDS = 5  # how often due reminders are sent (the granularity of /remind)
CATCH_UP = 100  # firings looked back at after a pause (a bot that was down)
DELAY = re.compile(r"^(\d+)([smhd])$")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@settings
class WelcomeSettings(BaseModel):
    """``[plugins.welcome]``."""

    welcome: str = Field(
        default="Welcome, {name}! Say /help to see what I can do.", min_length=1, max_length=500
    )
    greet: bool = True
    max_delay_hours: int = Field(default=24, ge=1, le=24 * 30)


@on_message
async def welcome(ctx: EventContext) -> None:
    """The first line a person writes in a channel gets the welcome, once."""
    config = ctx.settings(WelcomeSettings)
    if not config.greet or ctx.message.stream_event is not None:
        return
    seen = await ctx.store.channel.incr(f"seen:{ctx.user.user_id}", owner=ctx.user)
    if seen == 1:
        await ctx.reply(config.welcome.replace("{name}", ctx.message.author.display_name))


@command(summary="Remind me: /remind 10m stretch your legs")
async def remind(ctx: CommandContext) -> str:
    """Remind you of something later, here."""
    config = ctx.settings(WelcomeSettings)
    delay_text, _, what = ctx.args.strip().partition(" ")
    found = DELAY.match(delay_text.lower())
    if found is None or not what.strip():
        return "Write /remind DELAY TEXT, the delay like 30s, 10m, 2h or 1d."
    delay = int(found[1]) * UNITS[found[2]]
    if not 1 <= delay <= config.max_delay_hours * 3600:
        return f"I can remind you from 1 second to {config.max_delay_hours} hours from now."
    now = time.time()
    due = max(math.ceil((now + delay) / TICK_SECONDS), math.floor(now / TICK_SECONDS) + 1)
    conversation = ctx.message.conversation
    await ctx.store.shared.push(
        f"due:{due * TICK_SECONDS}",
        {"conversation": conversation.model_dump(), "text": what.strip()},
        owner=ctx.user,
        ttl=delay + 7 * 86400,
    )
    return f"I'll remind you in {delay_text}."


@every(TICK_SECONDS)
async def send_due(ctx: TimerContext) -> None:
    """Send every reminder due by this firing, once."""
    store = ctx.store.shared
    now = round(ctx.at.timestamp())
    done = await store.get("done_until")
    first = now - TICK_SECONDS  # the first firing ever: from its own instant on
    start = max(int(done) if done is not None else first, now - CATCH_UP * TICK_SECONDS)
    for instant in range(start + TICK_SECONDS, now + 1, TICK_SECONDS):
        for reminder in await store.values(f"due:{instant}"):
            where = ConversationKey.model_validate(reminder["conversation"])
            await ctx.send(where, f"Reminder: {reminder['text']}")
        await store.delete(f"due:{instant}")
    await store.set("done_until", now)
