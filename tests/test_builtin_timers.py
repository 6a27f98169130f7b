"""The ``timers`` built-in plugin, its real handlers on the in-memory store: an announcement
posts once its period passed AND its lines were seen, rotates through its messages, waits for
the stream on Twitch (not on Discord; YouTube counts as live unless its stream ended), starts
again when the stream goes live, and its settings are refused with their line."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.events import ConversationKey
from bot.plugins import TimerContext
from bot.settings import ConfigError
from tests.builtin_rig import Rig, load

FILE = """
[plugins.timers]

[[plugins.timers.announcements]]
name = "socials"
every = "2m"
min_lines = 3
messages = ["one", "two"]
"""
T0 = 1_800_000_000.0


async def tick(rig: Rig, at: float) -> list[tuple[ConversationKey, str]]:
    (timer,) = rig.plugin.timers
    before = len(rig.sent)
    when = datetime.fromtimestamp(at, UTC)
    await timer.func(TimerContext(timer.name, when, rig.plugin.services))
    return rig.sent[before:]


async def lines(
    rig: Rig, n: int, platform: str = "twitch", channel: str = "1971641", server: str = "streamer"
) -> None:
    for i in range(n):
        message = rig.message(
            f"line {i}", str(i), platform=platform, channel=channel, server=server
        )
        await rig.emit("message", message)


async def test_it_posts_after_its_period_and_its_lines_rotating_once_per_period() -> None:
    rig = load("timers", FILE)
    await rig.emit("stream_online", rig.message(""))
    await lines(rig, 2)
    assert await tick(rig, T0) == []  # the period starts at the first look
    assert await tick(rig, T0 + 125) == []  # two lines only
    await lines(rig, 1)
    assert await tick(rig, T0 + 60) == []  # three lines, not two minutes
    where = ConversationKey(platform="twitch", channel="1971641")
    assert await tick(rig, T0 + 120) == [(where, "one")]
    assert await tick(rig, T0 + 125) == []  # once
    await lines(rig, 3)
    assert await tick(rig, T0 + 200) == []  # a period from the last post
    assert await tick(rig, T0 + 240) == [(where, "two")]
    await lines(rig, 3)
    assert await tick(rig, T0 + 360) == [(where, "one")]  # round again


async def test_only_while_live_on_twitch_at_any_time_on_discord() -> None:
    rig = load("timers", FILE)
    await lines(rig, 5)
    await lines(rig, 5, platform="discord", channel="general", server="guild")
    assert await tick(rig, T0) == []
    sent = await tick(rig, T0 + 120)
    assert sent == [(ConversationKey(platform="discord", channel="general"), "one")]
    await rig.emit("stream_online", rig.message(""))  # the counts start again
    await lines(rig, 3)
    assert await tick(rig, T0 + 130) == []
    sent = await tick(rig, T0 + 250)
    assert sent == [(ConversationKey(platform="twitch", channel="1971641"), "one")]
    await rig.emit("stream_offline", rig.message(""))
    await lines(rig, 5)
    assert await tick(rig, T0 + 400) == []


async def test_youtube_is_live_unless_its_stream_ended() -> None:
    rig = load("timers", FILE)
    await lines(rig, 3, "youtube", "live-chat-1", "UCx")
    assert await tick(rig, T0) == []
    assert [t for _, t in await tick(rig, T0 + 120)] == ["one"]
    await rig.emit(
        "stream_offline", rig.message("", platform="youtube", channel="live-chat-1", server="UCx")
    )
    await lines(rig, 3, "youtube", "live-chat-1", "UCx")
    assert await tick(rig, T0 + 300) == []


async def test_the_same_stream_announced_again_keeps_its_counts_and_period() -> None:
    rig = load("timers", FILE)
    chat = {"platform": "youtube", "channel": "live-chat-2", "server": "UCy"}
    began = rig.message("", platform="youtube", channel="live-chat-2", server="UCy")
    await rig.emit("stream_online", began)
    await lines(rig, 3, *chat.values())
    assert await tick(rig, T0) == []
    await rig.emit("stream_online", began)  # an adapter restarted: the same chat, the same id
    assert [t for _, t in await tick(rig, T0 + 120)] == ["one"]
    again = rig.message("", platform="youtube", channel="live-chat-2", server="UCy")
    await rig.emit("stream_online", again)  # a new broadcast: counts and period start again
    await lines(rig, 3, *chat.values())
    assert await tick(rig, T0 + 250) == []
    assert [t for _, t in await tick(rig, T0 + 370)] == ["two"]


async def test_announcements_per_scope_and_turned_off() -> None:
    toml = (
        FILE
        + """
[[scope]]
match = "discord:guild"
plugins.timers.enabled = false
"""
    )
    rig = load("timers", toml)
    await lines(rig, 5, platform="discord", channel="general", server="guild")
    await lines(rig, 5, platform="discord", channel="other", server="guild2")
    assert await tick(rig, T0) == []
    sent = await tick(rig, T0 + 120)
    assert sent == [(ConversationKey(platform="discord", channel="other"), "one")]


HEAD = "[plugins.timers]\n\n[[plugins.timers.announcements]]\n"


@pytest.mark.parametrize(
    ("body", "line", "expected"),
    [
        ('name = "a"\nmessages = ["x"]\nevery = "soon"\n', 6, "write a duration"),
        ('name = "a"\nmessages = []\n', 5, "at least 1 item"),
        ('name = "a"\nmessages = ["x"]\nmin_lines = -1\n', 6, "greater than or equal to 0"),
        ('name = "Bad Name"\nmessages = ["x"]\n', 4, "lowercase letters"),
        ('name = "a"\nmessages = ["x"]\ncolour = 1\n', 6, "colour"),
    ],
)
def test_bad_announcements_are_refused_with_their_line(body: str, line: int, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load("timers", HEAD + body)
    message = str(info.value)
    assert f"chorus.toml:{line}:" in message, message
    assert expected in message, message
