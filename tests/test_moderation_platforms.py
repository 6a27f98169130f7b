"""Each platform's moderation actions on the wire, beyond the shared contract
(``tests/test_moderation_contract.py``): the exact requests the real SDKs send to the loopback
servers, the permission each checks before calling, YouTube's quota, Slack's limits, and the
audit trail every action is written to.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.moderation_service import serve
from adapters.slack.moderation import SlackModeration
from adapters.slack.sender import SlackSender
from bot.bus.base import InProcessBus
from bot.bus.topics import moderation_topic
from bot.events import ConversationKey, ModerationRequest
from bot.platform.moderation import Action, AuditedActions, Outcome
from bot.platform.moderation_memory import MemoryModeration
from bot.safety.audit import Audit, read_audit
from bot.state import connect
from tests.loopback.discord_server import CHANNEL_ID, HUMAN_ID, plain_message
from tests.loopback.slack_server import BOT_USER_ID, SlackServer
from tests.loopback.twitch_moderation import SCOPE_BANS, SCOPE_CHAT
from tests.moderation_rigs import (
    DISCORD_VIEWER,
    TWITCH_BOT,
    TWITCH_CHANNEL,
    TWITCH_VIEWER,
    YOUTUBE_VIEWER,
    discord_adapter,
    take_discord_permissions,
    twitch_adapter,
    youtube_adapter,
)

TWITCH = ConversationKey(platform="twitch", channel=TWITCH_CHANNEL)
DISCORD = ConversationKey(platform="discord", channel=str(CHANNEL_ID))


async def test_twitch_requests_are_helix_moderation_calls(
    monkeypatch: pytest.MonkeyPatch, key_tag: str
) -> None:
    async with twitch_adapter(monkeypatch, key_tag) as (server, adapter):
        server.chat_messages[TWITCH_CHANNEL] = {"abc-123"}
        actions = adapter.moderation
        assert (await actions.delete_message(TWITCH, "abc-123")).ok
        assert (await actions.timeout(TWITCH, TWITCH_VIEWER, 600, "third link")).ok
        assert (await actions.untimeout(TWITCH, TWITCH_VIEWER)).ok
        assert (await actions.ban(TWITCH, TWITCH_VIEWER, "spam bot")).ok
        calls = server.moderation_calls
        assert [(c.method, c.path) for c in calls] == [
            ("DELETE", "/helix/moderation/chat"),
            ("POST", "/helix/moderation/bans"),
            ("DELETE", "/helix/moderation/bans"),
            ("POST", "/helix/moderation/bans"),
        ]
        ids = {"broadcaster_id": TWITCH_CHANNEL, "moderator_id": TWITCH_BOT}
        assert calls[0].query == {**ids, "message_id": "abc-123"}
        assert calls[1].query == ids
        assert calls[1].body == {
            "data": {"user_id": TWITCH_VIEWER, "duration": 600, "reason": "third link"}
        }
        assert calls[2].query == {**ids, "user_id": TWITCH_VIEWER}
        assert calls[3].body == {"data": {"user_id": TWITCH_VIEWER, "reason": "spam bot"}}
        assert all(c.headers["authorization"] == "Bearer access-0" for c in calls)
        assert server.bans == {(TWITCH_CHANNEL, TWITCH_VIEWER): None}


async def test_twitch_missing_scope_is_known_from_the_token_and_never_asked(
    monkeypatch: pytest.MonkeyPatch, key_tag: str, caplog: pytest.LogCaptureFixture
) -> None:
    scopes = ("user:read:chat", "user:write:chat", "user:bot", SCOPE_CHAT)  # no banned_users
    async with twitch_adapter(monkeypatch, key_tag, scopes=scopes) as (server, adapter):
        caplog.set_level(logging.WARNING, logger="chorus.platform.moderation")
        results = [await adapter.moderation.timeout(TWITCH, TWITCH_VIEWER, 60, "x") for _ in "ab"]
        assert [r.outcome for r in results] == [Outcome.MISSING_PERMISSION] * 2
        assert SCOPE_BANS in results[0].detail and "TWITCH_ACCESS_TOKEN" in results[0].detail
        assert server.moderation_calls == []  # the token's scopes said so: Helix never asked
        lines = [r.getMessage() for r in caplog.records if "permission missing" in r.getMessage()]
        assert len(lines) == 1 and SCOPE_BANS in lines[0]
        server.chat_messages[TWITCH_CHANNEL] = {"m1"}  # what the token does carry still works
        assert (await adapter.moderation.delete_message(TWITCH, "m1")).ok


async def test_twitch_a_scope_revoked_later_is_told_by_helix_once(
    monkeypatch: pytest.MonkeyPatch, key_tag: str
) -> None:
    async with twitch_adapter(monkeypatch, key_tag) as (server, adapter):
        token = server.tokens["access-0"]
        token.scopes = tuple(s for s in token.scopes if s != SCOPE_CHAT)  # taken away since
        server.chat_messages[TWITCH_CHANNEL] = {"m1", "m2"}
        first = await adapter.moderation.delete_message(TWITCH, "m1")
        assert first.outcome is Outcome.MISSING_PERMISSION and SCOPE_CHAT in first.detail
        again = await adapter.moderation.delete_message(TWITCH, "m2")
        assert again.outcome is Outcome.MISSING_PERMISSION
        assert len(server.moderation_calls) == 1  # Helix's 401 was remembered
        assert server.chat_messages[TWITCH_CHANNEL] == {"m1", "m2"}


async def test_twitch_not_a_moderator_names_the_mod_command(
    monkeypatch: pytest.MonkeyPatch, key_tag: str
) -> None:
    async with twitch_adapter(monkeypatch, key_tag) as (server, adapter):
        server.moderators[TWITCH_CHANNEL] = set()
        result = await adapter.moderation.ban(TWITCH, TWITCH_VIEWER, "spam")
        assert result.outcome is Outcome.MISSING_PERMISSION
        assert "/mod mybot" in result.detail and "streamer" in result.detail
        assert len(server.moderation_calls) == 1


async def test_discord_timeout_and_ban_carry_the_audit_log_reason() -> None:
    async with discord_adapter() as (server, adapter):
        actions = adapter.moderation
        before = datetime.now(UTC)
        assert (await actions.timeout(DISCORD, DISCORD_VIEWER, 600, "third link: spam")).ok
        patch = server.moderation_calls[-1]
        assert (patch.method, patch.path) == (
            "PATCH",
            f"/api/v10/guilds/{server.guilds[0]['id']}/members/{DISCORD_VIEWER}",
        )
        until = datetime.fromisoformat(patch.body["communication_disabled_until"])
        assert 590 <= (until - before).total_seconds() <= 660
        assert server.audit_reasons[-1] == "third link: spam"
        assert (await actions.untimeout(DISCORD, DISCORD_VIEWER, "undo")).ok
        assert server.moderation_calls[-1].body == {"communication_disabled_until": None}
        assert server.timed_out_until(DISCORD_VIEWER) is None
        assert (await actions.ban(DISCORD, DISCORD_VIEWER, "raid account")).ok
        assert server.moderation_calls[-1].method == "PUT"
        assert server.bans == {DISCORD_VIEWER: "raid account"}
        message = plain_message(1_200_000_000_000_000_002, "spam")
        server.messages[message["id"]] = message
        assert (await actions.delete_message(DISCORD, message["id"], reason="link")).ok
        delete = server.requests[-1]
        assert (delete.method, delete.path) == (
            "DELETE",
            f"/api/v10/channels/{CHANNEL_ID}/messages/{message['id']}",
        )
        assert delete.headers["x-audit-log-reason"] == "link"
        assert message["id"] not in server.messages


async def test_discord_missing_permission_is_seen_in_the_cache_before_any_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with discord_adapter() as (server, adapter):
        message = plain_message(1_200_000_000_000_000_001, "spam")
        server.messages[message["id"]] = message
        await take_discord_permissions(server, adapter)
        caplog.set_level(logging.WARNING, logger="chorus.platform.moderation")
        deletes = before = len(server.requests)
        for _ in range(3):
            result = await adapter.moderation.delete_message(DISCORD, message["id"])
            assert result.outcome is Outcome.MISSING_PERMISSION
            assert "Manage Messages" in result.detail
        assert len(server.requests) == before == deletes  # known from the cache: nothing asked
        assert message["id"] in server.messages
        lines = [r for r in caplog.records if "Manage Messages" in r.getMessage()]
        assert len(lines) == 1
        assert str(HUMAN_ID) == DISCORD_VIEWER


async def test_discord_a_403_from_discord_is_remembered_too() -> None:
    async with discord_adapter() as (server, adapter):
        server.bot_permissions = 0  # the cache still shows the role's permissions
        first = await adapter.moderation.ban(DISCORD, DISCORD_VIEWER, "spam")
        assert first.outcome is Outcome.MISSING_PERMISSION and "Ban Members" in first.detail
        calls = len(server.moderation_calls)
        again = await adapter.moderation.ban(DISCORD, DISCORD_VIEWER, "spam")
        assert again.outcome is Outcome.MISSING_PERMISSION
        assert len(server.moderation_calls) == calls == 1


async def test_youtube_actions_are_paid_from_the_quota_ledger(key_tag: str) -> None:
    async with youtube_adapter(key_tag) as (server, adapter):
        chat = ConversationKey(platform="youtube", channel=server.live_chat_id)
        ledger = adapter.api.ledger
        units, inserts = ledger.usage.units, ledger.usage.inserts
        server.chat_messages.add("LCC.spam")
        assert (await adapter.moderation.delete_message(chat, "LCC.spam")).ok
        timeout = await adapter.moderation.timeout(chat, YOUTUBE_VIEWER, 300, "links")
        assert timeout.ok and timeout.ref
        assert (await adapter.moderation.untimeout(chat, YOUTUBE_VIEWER)).ok
        ban = await adapter.moderation.ban(chat, YOUTUBE_VIEWER, "spam bot")
        assert ban.ok and ban.ref in server.bans
        cost = ledger.config.moderation_cost
        assert cost == 50
        assert ledger.usage.units - units == 4 * cost
        assert ledger.usage.inserts - inserts == 4  # each paid like a message sent
        assert server.calls["delete"] == server.calls["unban"] == 1 and server.calls["ban"] == 2
        bodies = [c.body for c in server.moderation_calls if c.method == "POST"]
        assert bodies[0]["snippet"] == {
            "liveChatId": server.live_chat_id,
            "type": "temporary",
            "bannedUserDetails": {"channelId": YOUTUBE_VIEWER},
            "banDurationSeconds": 300,
        }
        assert bodies[1]["snippet"]["type"] == "permanent"
        assert "banDurationSeconds" not in bodies[1]["snippet"]
        lift = [c for c in server.moderation_calls if c.path.endswith("/bans")][1]
        assert lift.method == "DELETE" and lift.query == {"id": timeout.ref}


async def test_youtube_not_a_moderator_costs_one_call(key_tag: str) -> None:
    async with youtube_adapter(key_tag) as (server, adapter):
        chat = ConversationKey(platform="youtube", channel=server.live_chat_id)
        server.bot_is_moderator = False
        results = [await adapter.moderation.ban(chat, YOUTUBE_VIEWER, "spam") for _ in "abc"]
        assert {r.outcome for r in results} == {Outcome.MISSING_PERMISSION}
        assert "Moderators" in results[0].detail
        assert len(server.moderation_calls) == 1
        unknown = await adapter.moderation.unban(chat, "UCnobody")  # no ban id known: no call
        assert unknown.outcome is Outcome.NOT_FOUND and len(server.moderation_calls) == 1


async def test_youtube_a_token_without_the_scope_is_reported_once(key_tag: str) -> None:
    async with youtube_adapter(key_tag) as (server, adapter):
        chat = ConversationKey(platform="youtube", channel=server.live_chat_id)
        server.fail("ban", 403, "insufficientPermissions")
        first = await adapter.moderation.ban(chat, YOUTUBE_VIEWER, "spam")
        assert first.outcome is Outcome.MISSING_PERMISSION
        assert "YOUTUBE_REFRESH_TOKEN" in first.detail
        again = await adapter.moderation.timeout(chat, YOUTUBE_VIEWER, 60, "spam")
        assert again.outcome is Outcome.MISSING_PERMISSION
        assert len(server.moderation_calls) == 1 and server.bans == {}


async def test_slack_deletes_only_its_own_messages_and_says_so() -> None:
    async with SlackServer() as server:
        client = AsyncWebClient(token="xoxb-test-token", base_url=server.api_url, retry_handlers=[])
        actions = SlackModeration(SlackSender(client))
        capabilities = actions.capabilities()
        assert capabilities.allowed == frozenset({Action.DELETE})
        assert capabilities.own_messages_only
        assert "not allowed for bots on Slack" in capabilities.why_not(Action.BAN)
        channel = ConversationKey(platform="slack", channel="C0123")
        posted = await client.chat_postMessage(channel="C0123", text="an answer")
        own = str(posted["ts"])
        assert (await actions.delete_message(channel, own)).ok
        assert own not in server.messages
        theirs = server.chatter_message("C0123", "UHUMAN", "spam")
        refused = await actions.delete_message(channel, theirs)
        assert refused.outcome is Outcome.NOT_ALLOWED and "posted itself" in refused.detail
        assert theirs in server.messages
        calls = len(server.requests)
        for result in await asyncio.gather(
            actions.timeout(channel, "UHUMAN", 60, "x"),
            actions.untimeout(channel, "UHUMAN"),
            actions.ban(channel, "UHUMAN", "x"),
            actions.unban(channel, "UHUMAN"),
        ):
            assert result.outcome is Outcome.NOT_ALLOWED
            assert "not allowed for bots on Slack" in result.detail
        assert len(server.requests) == calls  # nothing asked of Slack
        assert BOT_USER_ID != "UHUMAN"


async def test_every_action_is_written_to_the_audit_trail(key_tag: str) -> None:
    redis = await connect.open_redis(f"memory://audit-{key_tag}")
    try:
        audit = Audit(redis, namespace=key_tag)
        twin = MemoryModeration(platform="twitch")
        actions = AuditedActions(twin, audit.record_action)
        room = ConversationKey(platform="twitch", channel="room")
        twin.post("room", "m1")
        await actions.delete_message(room, "m1", reason="link", actor="rule:links", user_id="u1")
        await actions.timeout(room, "u1", 600, "third link", actor="rule:links")
        twin.deny("room")
        await actions.ban(room, "u1", "raid", actor="mod:42")
        await audit.flush()
        entries = await read_audit(redis, namespace=key_tag)
        got = [(e.direction, e.rule, e.action, e.user_id, e.actor, e.reason) for e in entries]
        assert got == [
            ("act", "delete", "done", "u1", "rule:links", "link"),
            ("act", "timeout", "done", "u1", "rule:links", "third link"),
            ("act", "ban", "missing_permission", "u1", "mod:42", "raid"),
        ]
        assert entries[0].message_id == "m1" and entries[0].conversation == "twitch:room"
        assert audit.decisions["act", "ban", "missing_permission"] == 1
    finally:
        await redis.aclose()


def test_a_request_names_its_target() -> None:
    room = ConversationKey(platform="twitch", channel="room")
    with pytest.raises(ValidationError, match="message_id"):
        ModerationRequest(conversation=room, action="delete", user_id="u1")
    with pytest.raises(ValidationError, match="seconds"):
        ModerationRequest(conversation=room, action="timeout", user_id="u1")
    with pytest.raises(ValidationError, match="user_id"):
        ModerationRequest(conversation=room, action="ban")
    wire = ModerationRequest(conversation=room, action="unban", user_id="u1", actor="mod:7")
    assert ModerationRequest.model_validate_json(wire.model_dump_json()) == wire


async def test_the_gateway_service_performs_and_audits_each_request() -> None:
    bus = InProcessBus()
    twin = MemoryModeration(platform="twitch")
    twin.post("room", "m1")
    recorded: list[dict[str, str]] = []

    def audit(**fields: str) -> None:
        recorded.append(fields)

    current: list[MemoryModeration | None] = [twin]
    room = ConversationKey(platform="twitch", channel="room")
    serving = asyncio.create_task(serve(bus, "twitch", lambda: current[0], audit))
    try:
        topic = moderation_topic("twitch")
        await bus.publish(
            topic, ModerationRequest(conversation=room, action="delete", message_id="m1")
        )
        await bus.publish(
            topic, ModerationRequest(conversation=room, action="ban", user_id="u1", actor="mod:7")
        )
        await bus.drain(timeout=10)
        current[0] = None  # the adapter is restarting: the request is audited as failed
        await bus.publish(topic, ModerationRequest(conversation=room, action="unban", user_id="u1"))
        await bus.drain(timeout=10)
    finally:
        serving.cancel()
        await asyncio.gather(serving, return_exceptions=True)
        await bus.close()
    assert twin.messages["room"] == set() and ("room", "u1") in twin.bans
    assert [(r["action"], r["outcome"], r["actor"]) for r in recorded] == [
        ("delete", "done", "chorus"),
        ("ban", "done", "mod:7"),
        ("unban", "failed", ""),
    ]
