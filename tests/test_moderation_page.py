"""The dashboard's Moderation page logic: which timeouts and bans still offer an undo, and the
undo request it hands to the platform's gateway (only untimeout or unban, on a real
conversation). The page itself, in Chromium against a real process, is
``tests/test_moderation_plugin_e2e.py``."""

from __future__ import annotations

from typing import cast

import pytest

from bot.admin.moderation_page import _lifted, undo
from bot.admin.views import Sources
from bot.events import ModerationRequest
from bot.safety.audit import AuditEntry


def act(at: int, rule: str, outcome: str = "done", user: str = "u1") -> AuditEntry:
    return AuditEntry(
        at_ms=at, direction="act", rule=rule, action=outcome, conversation="twitch:c", user_id=user
    )


def test_a_timeout_is_lifted_only_by_a_later_done_untimeout_of_the_same_user() -> None:
    entries = [
        act(1, "timeout"),
        act(2, "timeout", user="u2"),
        act(3, "untimeout", "missing_permission"),  # tried, not done: still timed out
        act(4, "ban", user="u3"),
        act(5, "untimeout", user="u2"),
    ]
    assert _lifted(entries) == {("twitch:c", "u2", 2)}


class Gateway:
    def __init__(self) -> None:
        self.requests: list[ModerationRequest] = []

    async def __call__(self, request: ModerationRequest) -> None:
        self.requests.append(request)


async def test_the_undo_asks_the_gateway_for_an_untimeout_or_unban_only() -> None:
    gateway = Gateway()
    src = cast(Sources, type("Src", (), {"moderate": gateway})())
    form = {"action": "unban", "conversation": "twitch:c", "user_id": "u3"}
    done = await undo(src, form, "account:ops")
    assert gateway.requests == [done]
    assert (done.action, done.user_id, done.actor) == ("unban", "u3", "account:ops")
    with pytest.raises(ValueError):
        await undo(src, {**form, "action": "ban"}, "account:ops")  # never a new ban
    with pytest.raises(ValueError):
        await undo(src, {**form, "user_id": ""}, "account:ops")
    assert len(gateway.requests) == 1
    nowhere = cast(Sources, type("Src", (), {"moderate": None})())
    with pytest.raises(LookupError):
        await undo(nowhere, form, "account:ops")
