"""A plugin listening to every event kind, with handlers that misbehave on purpose.

``on_message`` counts lines per channel in the plugin's store and writes each line it saw to the
file ``LISTENER_LOG`` names; ``on_reply`` writes the bot's replies there. Three more handlers
raise, hang and call ``sys.exit()`` when a line asks them to: a bot that contains them keeps
answering, and counts each failure.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from bot.plugins import (
    CommandContext,
    EventContext,
    QuotaReached,
    command,
    on_member_join,
    on_member_leave,
    on_message,
    on_reaction,
    on_reply,
    on_stream_event,
)

RAISE, HANG, EXIT = "please raise", "please hang", "please exit"


def _write(line: str) -> None:
    path = os.environ.get("LISTENER_LOG")
    if path:
        with Path(path).open("a", encoding="utf-8") as out:
            out.write(line + "\n")


@on_message
async def count_lines(ctx: EventContext) -> None:
    seen = await ctx.store.channel.incr("lines")
    _write(f"seen {seen}: {ctx.message.text}")


@on_stream_event
async def thank(ctx: EventContext) -> None:
    event = ctx.stream_event
    assert event is not None
    reward = f" {event.reward} ({event.cost})" if event.kind == "redemption" else ""
    _write(f"stream event: {event.kind}{reward}")


@on_reply
async def replies(ctx: EventContext) -> None:
    _write(f"replied: {ctx.reply_text}")


@on_message
async def raises(ctx: EventContext) -> None:
    if RAISE in ctx.message.text:
        raise RuntimeError("the listener is broken on purpose")


@on_message(timeout=0.5)
async def hangs(ctx: EventContext) -> None:
    if HANG in ctx.message.text:
        await asyncio.sleep(3600)


@on_message
async def exits(ctx: EventContext) -> None:
    if EXIT in ctx.message.text:
        sys.exit(4)


@command
async def askmodel(ctx: CommandContext) -> str:
    """Ask the model directly: /askmodel QUESTION"""
    try:
        answer = await ctx.ask(ctx.args, system="Answer in one word.", max_tokens=50)
    except QuotaReached as exc:
        return f"quota reached: {exc.rule}"
    return "model says: " + answer


@command
async def announce(ctx: CommandContext) -> str:
    """Send TEXT, read backwards, to this conversation on the plugin's own: /announce TXET"""
    await ctx.send(ctx.message.conversation, ctx.args[::-1])
    return "announced"


@on_member_join
async def joined(ctx: EventContext) -> None:
    _write(f"member_join: {ctx.user.user_id} in {ctx.message.conversation.channel}")


@on_member_leave
async def left(ctx: EventContext) -> None:
    _write(f"member_leave: {ctx.user.user_id}")


@on_reaction
async def reacted(ctx: EventContext) -> None:
    event = ctx.channel_event
    assert event is not None
    _write(f"{event.kind}: {event.emoji} on {event.message_id} by {ctx.user.user_id}")
