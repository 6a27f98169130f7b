"""Each platform's outbound message rate limit, as numbers.

Why apart from the policy: the policy decides when to speak and never sends; each adapter's send
chokepoint enforces its own platform's limit. These numbers are kept in one table only so the
replay (``bot/engagement/replay.py``) can report a trace's peak send rate against them. YouTube has
no such rate limit to report against: what limits it is the day's quota (``bot/quota/plan.py``),
which the replay simulates instead.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SendLimit:
    """A platform's outbound budget: at most ``messages`` per sliding ``seconds``.

    Enforcement lives in each adapter's send chokepoint; the policy keeps the numbers only so
    ``bot/engagement/replay.py`` can report a trace's peak send rate against them.
    """

    messages: int
    seconds: float
    per_channel: bool  # False: one budget for the bot account across all channels

    @property
    def per_30s(self) -> float:
        return self.messages * 30.0 / self.seconds


SEND_LIMITS: dict[str, SendLimit] = {
    # dev.twitch.tv/docs/chat (rate limits): 20 per 30 s per user account, 100 per 30 s where
    # the bot is broadcaster or moderator; exceeding it silences the bot for 30 minutes.
    "twitch": SendLimit(20, 30.0, per_channel=False),
    "twitch_moderator": SendLimit(100, 30.0, per_channel=False),
    # Discord: message create is bucketed about 5 per 5 s per channel; Slack chat.postMessage
    # allows about 1 per second per channel. Both ~1/s per channel.
    "discord": SendLimit(5, 5.0, per_channel=True),
    "slack": SendLimit(1, 1.0, per_channel=True),
}


QUOTA_PLATFORMS = frozenset({"youtube"})  # limited by a daily quota, not a send rate


def send_limit(platform: str, *, bot_is_moderator: bool = False) -> SendLimit | None:
    """The limit for ``platform`` (unknown platforms get Slack's conservative 1/s per channel;
    None for a platform limited by its quota)."""
    if platform in QUOTA_PLATFORMS:
        return None
    if platform == "twitch" and bot_is_moderator:
        return SEND_LIMITS["twitch_moderator"]
    return SEND_LIMITS.get(platform, SEND_LIMITS["slack"])
