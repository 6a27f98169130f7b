"""What Slack sends that no listener of ours takes: acknowledged with a 200, and counted.

Why: bolt answers a request no listener matches with ``404 unhandled request``. Slack treats
anything but a 200 as a failed delivery: it retries the event three times, and an app that
fails 5% of its deliveries in an hour gets its event subscriptions disabled. An app's
subscriptions bring more types than Chorus handles (``reaction_added``, ``member_joined_channel``,
``app_home_opened``... as the workspace's admins configure it), so every well-signed event is
acknowledged here and counted by type (``chorus_slack_events_ignored``). The first of each type
in a process is logged once.

``app_rate_limited`` is Slack's own callback, a top-level Events API payload (no inner event):
Slack is dropping this app's events for the minute it names (more than 30,000 an hour from one
workspace). It is logged as a warning with the minute and the team, and counted
(``chorus_slack_app_rate_limited``).

The adapter builds bolt with ``raise_error_for_unhandled_request=True``, so an unmatched request
reaches the app's error handler (``on_error``) as ``BoltUnhandledRequestError`` instead of
bolt's 404. Requests bolt handles itself (signature, ``url_verification``, the bot's own
events), the event_id dedupe and the listeners are unchanged: this sees only what they leave.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

from slack_bolt.error import BoltUnhandledRequestError
from slack_bolt.response import BoltResponse

log = logging.getLogger("chorus.slack")

RATE_LIMITED = "app_rate_limited"
_LABEL = re.compile(r"[a-z][a-z0-9_.]{0,63}")


def kind_of(body: Mapping[str, Any]) -> str:
    """The label an unhandled request is counted under: the inner event's type for an
    ``event_callback``, ``command`` for a slash command, else the payload's own ``type``
    (``block_actions``...). Anything else is ``other``, so the label set stays bounded."""
    kind = body.get("type")
    event = body.get("event")
    if kind == "event_callback" and isinstance(event, Mapping):
        kind = event.get("type")
    elif kind is None and "command" in body:
        kind = "command"
    return kind if isinstance(kind, str) and _LABEL.fullmatch(kind) else "other"


class Unhandled:
    """The adapter's count of what it acknowledged without handling."""

    def __init__(self) -> None:
        self.ignored: Counter[str] = Counter()  # by event type
        self.rate_limited = 0

    def acknowledge(self, body: Mapping[str, Any]) -> BoltResponse:
        """Count ``body`` and answer it 200, as Slack needs for every event it delivered."""
        if body.get("type") == RATE_LIMITED:
            self.rate_limited += 1
            log.warning(
                "slack is rate-limiting this app's events (app_rate_limited): the events of "
                "that minute are not delivered",
                extra={
                    "team": body.get("team_id"),
                    "minute_rate_limited": body.get("minute_rate_limited"),
                    "api_app_id": body.get("api_app_id"),
                },
            )
            return BoltResponse(status=200, body="")
        kind = kind_of(body)
        if kind not in self.ignored:
            log.info(
                "slack event type not handled; acknowledged and counted from now on",
                extra={"type": kind},
            )
        self.ignored[kind] += 1
        return BoltResponse(status=200, body="")

    async def on_error(self, error: Exception, body: dict[str, Any]) -> BoltResponse:
        """bolt's error handler: an unmatched request is acknowledged; a request bolt's
        middleware or listener matching cannot handle (a field of another type than Slack
        sends) is one line and a 400, and the adapter goes on. Our listeners only spawn tasks,
        which log their own failures."""
        if isinstance(error, BoltUnhandledRequestError):
            return self.acknowledge(body)
        log.warning(
            "slack request skipped: bolt could not handle it",
            extra={"status": 400, "error": f"{type(error).__name__}: {error}"},
        )
        return BoltResponse(status=400, body="")
