"""The ``timers`` built-in plugin: periodic announcements, rotating through a list.

``[[plugins.timers.announcements]]`` (or a scope's ``plugins.timers.announcements``) says, for
each announcement: ``every`` (a period: ``15m``), ``min_lines`` (chat lines seen in the channel
since its last post), ``messages`` (posted in turn) and ``live_only`` (on Twitch and YouTube,
only while the stream is live: ``bot.plugins.builtin.stream``; Discord and Slack have no stream,
so there it posts at any time).

How it holds across workers: every line seen (``on_message``) increments the channel's line
counter in the store and records the channel; one plugin timer ticks every ``TICK`` seconds and,
through the plugin timers' lease, runs in one worker per tick. That worker looks at each channel
the bot has seen chat in and posts each announcement that is due (its period since its last post
and at least ``min_lines`` lines since), claiming the post in the store first so that a slow tick
overlapping the next never posts twice. Going live restarts the counts: the first announcement
of a stream comes a full period after it went live. Messages go through ``ctx.send``: the
outbound check and the platform's sending chokepoint, like every reply.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bot.plugins import (
    Bucket,
    ConversationKey,
    EventContext,
    TimerContext,
    every,
    on_message,
    on_stream_offline,
    on_stream_online,
    settings,
)
from bot.plugins.builtin import stream
from bot.plugins.builtin.expand import NAME
from bot.plugins.timers import parse_period

TICK = "5s"  # how often one worker looks for due announcements
LINES = "lines"  # the channel's line counter since the stream went live (or ever)
CHANNELS = "channels"  # (shared) the places the bot has seen chat in
MAX_CHANNELS = 1000
KNOWN_SECONDS = 86_400.0  # a channel is recorded again at most once a day


class Announcement(BaseModel):
    """One ``[[plugins.timers.announcements]]``."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """Its name (1-32 lowercase letters, digits, - or _), unique in the list."""
    every: str | float = "15m"
    """The period: 30s, 15m, 1h30m, or a number of seconds."""
    min_lines: int = Field(default=10, ge=0, le=100_000)
    """Chat lines to see in the channel since the last post before the next."""
    messages: list[str] = Field(min_length=1, max_length=100)
    """The texts, posted in turn."""
    live_only: bool = True
    """On Twitch and YouTube, post only while the stream is live."""

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.fullmatch(value):
            raise ValueError("use 1-32 lowercase letters, digits, - or _")
        return value

    @field_validator("every")
    @classmethod
    def _every(cls, value: str | float) -> str | float:
        parse_period(value)  # its message names the formats
        return value

    @field_validator("messages")
    @classmethod
    def _messages(cls, value: list[str]) -> list[str]:
        if any(not m.strip() or len(m) > 500 for m in value):
            raise ValueError("each message is 1-500 characters")
        return value

    @property
    def seconds(self) -> float:
        return parse_period(self.every)


@settings
class TimerSettings(BaseModel):
    """``[plugins.timers]``."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Post announcements here (`false` in a scope turns them off there)."""
    announcements: list[Announcement] = Field(default_factory=list)
    """The announcements, each with its period, lines and messages."""

    @model_validator(mode="after")
    def _unique(self) -> TimerSettings:
        names = [a.name for a in self.announcements]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two announcements named {twice[0]!r}")
        return self


@on_message
async def count(ctx: EventContext) -> None:
    """A chat line: the channel's counter, and the channel recorded once a day."""
    message = ctx.message
    if message.author.is_bot or not message.text.strip():
        return
    place = ctx.store.channel
    await place.incr(LINES)
    channel = message.conversation.channel
    if await place.claim("known", KNOWN_SECONDS):
        where = [message.platform, message.server or "", channel]
        await ctx.store.shared.push(CHANNELS, where, max_len=MAX_CHANNELS)


@on_stream_online
async def online(ctx: EventContext) -> None:
    """Live: the counts start again, the first post a full period from now."""
    place = ctx.store.channel
    if not await stream.went_online(place, ctx.message.sent_at, ctx.message.id):
        return  # the same stream announced again: its counts go on
    await place.delete(LINES)
    for announcement in ctx.settings(TimerSettings).announcements:
        await place.delete(f"mark:{announcement.name}")


@on_stream_offline
async def offline(ctx: EventContext) -> None:
    await stream.went_offline(ctx.store.channel)


@every(TICK, name="announce")
async def announce(ctx: TimerContext) -> None:
    """Post what is due, in every channel the bot has seen chat in."""
    now = ctx.at.timestamp()
    seen: set[tuple[str, str]] = set()
    for raw in await ctx.store.shared.values(CHANNELS):
        if not isinstance(raw, list) or len(raw) != 3 or not all(isinstance(p, str) for p in raw):
            continue
        platform, server, channel = raw
        if (platform, channel) in seen:
            continue
        seen.add((platform, channel))
        config = ctx.settings_for(TimerSettings, platform, channel, server or None)
        if not config.enabled or not config.announcements:
            continue
        place = ctx.store.for_channel(platform, channel)
        live, _ = await stream.live_since(place, platform)
        for announcement in config.announcements:
            if announcement.live_only and not live:
                continue
            text = await due(place, announcement, now)
            if text is not None:
                await ctx.send(ConversationKey(platform=platform, channel=channel), text)


async def due(place: Bucket, announcement: Announcement, now: float) -> str | None:
    """The message to post now for ``announcement`` in ``place``, or None; a post is claimed
    and its mark (the instant and the line count) moved before it is returned."""
    mark_key = f"mark:{announcement.name}"
    lines = int(await place.get(LINES, 0) or 0)
    mark: Any = await place.get(mark_key)
    if not isinstance(mark, dict):
        await place.set(mark_key, {"at": now, "lines": 0})  # the period starts now
        return None
    since = float(mark.get("at", now))
    if now - since < announcement.seconds or lines - int(mark.get("lines", 0)) < (
        announcement.min_lines
    ):
        return None
    if not await place.claim(f"post:{announcement.name}:{since}", announcement.seconds):
        return None
    await place.set(mark_key, {"at": now, "lines": lines})
    turn = await place.incr(f"turn:{announcement.name}") - 1
    return announcement.messages[turn % len(announcement.messages)]
