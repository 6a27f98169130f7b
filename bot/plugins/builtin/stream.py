"""Whether a channel's stream is live, and since when: what ``{uptime}`` and the timers read.

Each built-in plugin records the stream events it receives in its own store (a plugin sees only
its own keys): ``on_stream_online`` keeps ``{"live": true, "since": EPOCH}`` in the channel's
place, ``on_stream_offline`` ``{"live": false}``. Whether a channel counts as live then depends
on its platform:

* Twitch: live only between an online and an offline event (``TWITCH_STREAM_STATE=true``
  delivers them); with no event seen yet, not live.
* YouTube: the bot reads a live chat only while a broadcast runs, so a chat it reads is live
  unless the offline event (the chat ended) came last; the online event (the bot began following
  the chat) gives ``{uptime}`` its start.

An online event seen again (the same message id: an adapter restarted during the stream
announces it again) changes nothing, so the uptime and the timers' periods keep their start.
* Every other platform (Discord, Slack, the console): no stream, always "live".
"""

from __future__ import annotations

from datetime import datetime

from bot.plugins import Bucket

STREAM = "stream"  # the channel's key
LIVE_PLATFORMS = frozenset({"twitch", "youtube"})


async def went_online(place: Bucket, at: datetime, event: str) -> bool:
    """Record going live; False when this very event (its message id) was recorded already (a
    restarted adapter announcing the same broadcast again keeps its start)."""
    state = await place.get(STREAM)
    if isinstance(state, dict) and state.get("live") and state.get("event") == event:
        return False
    await place.set(STREAM, {"live": True, "since": at.timestamp(), "event": event})
    return True


async def went_offline(place: Bucket) -> None:
    await place.set(STREAM, {"live": False})


async def live_since(place: Bucket, platform: str) -> tuple[bool, float | None]:
    """(live, since: the epoch second it went live, when an event said so)."""
    if platform not in LIVE_PLATFORMS:
        return True, None
    state = await place.get(STREAM)
    if not isinstance(state, dict):
        return platform == "youtube", None
    since = state.get("since")
    return bool(state.get("live")), float(since) if isinstance(since, int | float) else None


def duration(seconds: float) -> str:
    """``3h 5m``, ``12m``, ``40s``: an uptime as chat shows it."""
    total = max(0, int(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m" if minutes else f"{secs}s"
