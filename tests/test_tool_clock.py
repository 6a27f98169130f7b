"""current_time: IANA zones, DST, friendly names and helpful errors, with an injected clock."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from bot.events import Author, ChatMessage, ConversationKey
from bot.tools.base import ToolContext, ToolError
from bot.tools.builtin.clock import clock_tool

WINTER = datetime(2025, 3, 1, 13, 5, 9, 123456, tzinfo=UTC)
SUMMER = datetime(2025, 7, 14, 22, 30, tzinfo=UTC)


def make_ctx() -> ToolContext:
    message = ChatMessage(
        platform="console",
        id="m1",
        conversation=ConversationKey(platform="console", channel="local"),
        author=Author(id="u1"),
        text="what time is it?",
    )
    return ToolContext(message=message)


async def ask(timezone: str | None, now: datetime = WINTER) -> str:
    tool = clock_tool(lambda: now)
    arguments = {} if timezone is None else {"timezone": timezone}
    return await tool.call(arguments, make_ctx())


@pytest.mark.parametrize(
    ("zone", "now", "expected"),
    [
        (None, WINTER, "2025-03-01T13:05:09+00:00, Saturday, UTC (UTC+00:00)"),
        (
            "Europe/Paris",
            WINTER,
            "2025-03-01T14:05:09+01:00, Saturday, Europe/Paris (CET, UTC+01:00)",
        ),
        (
            "Europe/Paris",
            SUMMER,
            "2025-07-15T00:30:00+02:00, Tuesday, Europe/Paris (CEST, UTC+02:00)",
        ),
        (
            "america/new_york",
            WINTER,
            "2025-03-01T08:05:09-05:00, Saturday, America/New_York (EST, UTC-05:00)",
        ),
        ("Tokyo", WINTER, "2025-03-01T22:05:09+09:00, Saturday, Asia/Tokyo (JST, UTC+09:00)"),
        (
            "Asia/Kolkata",
            WINTER,
            "2025-03-01T18:35:09+05:30, Saturday, Asia/Kolkata (IST, UTC+05:30)",
        ),
        ("+05:30", WINTER, "2025-03-01T18:35:09+05:30, Saturday, UTC+05:30 (UTC+05:30)"),
        ("UTC-3", WINTER, "2025-03-01T10:05:09-03:00, Saturday, UTC-03:00 (UTC-03:00)"),
        ("gmt", WINTER, "2025-03-01T13:05:09+00:00, Saturday, UTC (UTC+00:00)"),
    ],
)
async def test_time_in_zones(zone: str | None, now: datetime, expected: str) -> None:
    assert await ask(zone, now) == expected


async def test_unknown_zone_suggests_close_matches() -> None:
    with pytest.raises(ToolError) as info:
        await ask("Europe/Pariss")
    message = str(info.value)
    assert message.startswith("unknown time zone 'Europe/Pariss': use an IANA name")
    assert "did you mean Europe/Paris" in message


async def test_ambiguous_city_is_not_guessed_but_suggested() -> None:
    # "Pacific" is both Canada/Pacific and US/Pacific: offer both rather than pick one
    with pytest.raises(ToolError) as info:
        await ask("pacific")
    assert "Canada/Pacific" in str(info.value) and "US/Pacific" in str(info.value)
    with pytest.raises(ToolError, match="unknown time zone 'Mars/Olympus_Mons'"):
        await ask("Mars/Olympus_Mons")
    with pytest.raises(ToolError, match="not a valid UTC offset"):
        await ask("+15:00")


def test_spec_describes_the_parameter() -> None:
    spec = clock_tool().spec
    assert spec.name == "current_time"
    assert spec.description == "Get the current date, time and weekday in a time zone."
    prop = spec.parameters["properties"]["timezone"]
    assert prop["default"] == "UTC" and "IANA" in prop["description"]
    assert "required" not in spec.parameters
