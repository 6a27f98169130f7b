"""The moderation actions' contract, held over the in-memory twin and every real adapter.

One suite, one rig per implementation (``tests/moderation_rigs.py``): the twin, and each
platform's real SDK against its loopback server, whose recorded state is the evidence (a message
the server no longer holds was deleted; a ban it holds was placed). Slack, which allows a bot
only to delete its own messages, has its own tests (``tests/test_moderation_slack.py``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest

from bot.platform.moderation import Action, Outcome
from tests.moderation_rigs import Rig, discord_rig, twin_rig, twitch_rig, youtube_rig

RIGS = ("twin", "twitch", "discord", "youtube")


@pytest.fixture(params=RIGS)
async def rig(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, key_tag: str
) -> AsyncIterator[Rig]:
    if request.param == "twin":
        async with twin_rig() as built:
            yield built
    elif request.param == "twitch":
        async with twitch_rig(monkeypatch, key_tag) as built:
            yield built
    elif request.param == "discord":
        async with discord_rig() as built:
            yield built
    elif request.param == "youtube":
        async with youtube_rig(key_tag) as built:
            yield built


async def test_capabilities_allow_every_action(rig: Rig) -> None:
    capabilities = rig.actions.capabilities()
    assert all(capabilities.allows(action) for action in Action)
    assert capabilities.max_timeout_seconds is not None
    assert capabilities.max_timeout_seconds >= 600


async def test_delete_removes_the_message_once(rig: Rig) -> None:
    message_id = await rig.post()
    result = await rig.actions.delete_message(rig.conversation, message_id, reason="link")
    assert result.outcome is Outcome.DONE, result
    assert rig.deleted(message_id)
    again = await rig.actions.delete_message(rig.conversation, message_id)
    assert again.outcome is Outcome.NOT_FOUND, again


async def test_timeout_then_untimeout(rig: Rig) -> None:
    user = rig.user_id
    result = await rig.actions.timeout(rig.conversation, user, 600, "third link")
    assert result.outcome is Outcome.DONE, result
    assert rig.timed_out(user) and not rig.banned(user)
    lifted = await rig.actions.untimeout(rig.conversation, user, "undo")
    assert lifted.outcome is Outcome.DONE, lifted
    assert not rig.timed_out(user)
    again = await rig.actions.untimeout(rig.conversation, user)
    assert again.outcome is Outcome.NOT_FOUND, again


async def test_a_timeout_out_of_range_is_refused_before_the_platform(rig: Rig) -> None:
    before = rig.reached()
    longest = rig.actions.capabilities().max_timeout_seconds
    assert longest is not None
    result = await rig.actions.timeout(rig.conversation, rig.user_id, longest + 1, "too long")
    assert result.outcome is Outcome.FAILED and str(longest) in result.detail
    assert rig.reached() == before
    assert not rig.timed_out(rig.user_id)


async def test_ban_then_unban(rig: Rig) -> None:
    user = rig.user_id
    result = await rig.actions.ban(rig.conversation, user, "spam bot")
    assert result.outcome is Outcome.DONE, result
    assert rig.banned(user)
    lifted = await rig.actions.unban(rig.conversation, user, "appeal")
    assert lifted.outcome is Outcome.DONE, lifted
    assert not rig.banned(user)
    again = await rig.actions.unban(rig.conversation, user)
    assert again.outcome is Outcome.NOT_FOUND, again


async def test_missing_permission_is_reported_once_and_not_retried(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    await rig.deny()
    caplog.set_level(logging.WARNING, logger="chorus.platform.moderation")
    first = await rig.actions.ban(rig.conversation, rig.user_id, "spam")
    assert first.outcome is Outcome.MISSING_PERMISSION, first
    assert first.detail, "the result says what is missing and where to grant it"
    reached = rig.reached()
    for _ in range(3):
        again = await rig.actions.ban(rig.conversation, rig.user_id, "spam")
        assert again.outcome is Outcome.MISSING_PERMISSION
    assert rig.reached() == reached, "a known gap is not asked about again"
    assert not rig.banned(rig.user_id)
    lines = [r for r in caplog.records if "permission missing" in r.getMessage()]
    assert len(lines) == 1 and rig.gaps.reported == 1
    assert first.detail in lines[0].getMessage()
