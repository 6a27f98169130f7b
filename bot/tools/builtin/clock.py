"""``current_time``: the date and time in any IANA time zone.

Models do not know what time it is, and users ask ("what day is it in Tokyo?"), so this is the
cheapest useful tool. Zones come from ``zoneinfo``; on systems without the IANA database
(Windows, slim containers) ``pip install tzdata`` provides it. A unique city name ("Tokyo") is
accepted for its zone; anything else unknown is an error that suggests close matches, so the
model can retry with a real zone name.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from bot.events import utcnow
from bot.tools.base import ToolError
from bot.tools.function import FunctionTool

_UTC_ALIASES = frozenset({"utc", "z", "zulu", "gmt", "etc/utc", "universal"})
_OFFSET = re.compile(r"^(?:utc|gmt)?\s*([+-])(\d{1,2})(?::?(\d{2}))?$", re.IGNORECASE)


@functools.cache
def _zones() -> tuple[frozenset[str], dict[str, str], dict[str, list[str]]]:
    """All zone names, a lower-case index, and zones by their last part ("paris")."""
    names = frozenset(available_timezones())
    by_lower = {name.lower(): name for name in names}
    by_city: dict[str, list[str]] = {}
    for name in sorted(names):
        by_city.setdefault(name.rsplit("/", 1)[-1].lower(), []).append(name)
    return names, by_lower, by_city


def resolve_zone(text: str) -> tuple[str, timezone | ZoneInfo]:
    """``(display name, tzinfo)`` for a zone name, a unique city or a ``+05:30`` style offset."""
    wanted = text.strip() or "UTC"
    if wanted.lower() in _UTC_ALIASES:
        return "UTC", ZoneInfo("UTC")
    offset = _OFFSET.match(wanted)
    if offset:
        sign, hours, minutes = offset.group(1), int(offset.group(2)), int(offset.group(3) or 0)
        if hours > 14 or minutes > 59:
            raise ToolError(f"{wanted!r} is not a valid UTC offset (at most +/-14:00)")
        delta = timedelta(hours=hours, minutes=minutes) * (-1 if sign == "-" else 1)
        return f"UTC{sign}{hours:02d}:{minutes:02d}", timezone(delta)
    names, by_lower, by_city = _zones()
    if not names:
        raise ToolError("this system has no time zone database; install the tzdata package")
    key = wanted.replace(" ", "_").lower()
    name = by_lower.get(key)
    if name is None and len(by_city.get(key, ())) == 1:
        name = by_city[key][0]
    if name is not None:
        try:
            return name, ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    raise ToolError(_unknown(wanted, key, by_lower, by_city))


def _unknown(wanted: str, key: str, by_lower: dict[str, str], by_city: dict[str, list[str]]) -> str:
    suggestions = list(by_city.get(key, ()))
    suggestions += [by_lower[m] for m in difflib.get_close_matches(key, by_lower, n=3)]
    for city in difflib.get_close_matches(key.rsplit("/", 1)[-1], by_city, n=3):
        suggestions += by_city[city]
    unique = list(dict.fromkeys(suggestions))[:5]
    hint = f"; did you mean {', '.join(unique)}?" if unique else ""
    return (
        f"unknown time zone {wanted!r}: use an IANA name such as Europe/Paris, "
        f"America/New_York or UTC{hint}"
    )


def describe(moment: datetime, zone_name: str) -> str:
    """``2025-03-01T14:05:09+01:00, Saturday, Europe/Paris (CET, UTC+01:00)``."""
    offset = moment.utcoffset() or timedelta()
    sign = "-" if offset < timedelta() else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    utc_offset = f"UTC{sign}{minutes // 60:02d}:{minutes % 60:02d}"
    abbrev = moment.tzname() or ""
    detail = utc_offset if abbrev in ("", "UTC", utc_offset) else f"{abbrev}, {utc_offset}"
    return f"{moment.isoformat(timespec='seconds')}, {moment:%A}, {zone_name} ({detail})"


def clock_tool(now: Callable[[], datetime] = utcnow, *, timeout: float = 5.0) -> FunctionTool:
    """The ``current_time`` tool; ``now`` (an aware datetime) is injectable for tests."""

    async def current_time(timezone: str = "UTC") -> str:
        """Get the current date, time and weekday in a time zone.

        Args:
            timezone: an IANA time zone such as Europe/Paris or America/New_York, a city
                such as Tokyo, or a UTC offset such as +05:30; defaults to UTC.
        """
        zone_name, tz = resolve_zone(timezone)
        return describe(now().astimezone(tz), zone_name)

    return FunctionTool(current_time, timeout=timeout)
