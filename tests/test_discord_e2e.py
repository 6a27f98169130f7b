"""End to end: the real discord.py client against the loopback gateway and REST stand-in (tests/discord_rig.py): mentions, mass mentions, long answers, other bots, DMs, threads, typing, ambient channels, deletions and slash commands. Every wait is on an event, bounded by a timeout; nothing sleeps."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import pytest

from bot.events import ChatMessage, ConversationKey, MessageDeleted
from tests.discord_rig import TOKEN, mention, running, slash_interaction
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    HUMAN_ID,
    THREAD_ID,
    DiscordServer,
    guild_create,
    load_fixture,
    plain_message,
)


@pytest.fixture
async def server() -> AsyncIterator[DiscordServer]:
    async with DiscordServer() as srv:
        assert isinstance(srv, DiscordServer)
        srv.guilds = [guild_create()]
        yield srv


# -- answering -----------------------------------------------------------------------------------
async def test_mention_is_answered_as_a_reply(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", load_fixture("discord_message_create_reply")["d"])
        (body,) = await rig.posts(CHANNEL_ID)
        (seen,) = rig.seen
    assert seen.mentions_bot and seen.reply_to_bot and seen.text == "what does this say?"
    assert body == {
        "content": "you said: what does this say?",
        "tts": False,
        "components": [],
        "nonce": "r334385199974967099.0",
        "enforce_nonce": True,
        "allowed_mentions": {"parse": [], "users": [HUMAN_ID], "replied_user": True},
        "message_reference": {
            "message_id": 334385199974967099,
            "channel_id": CHANNEL_ID,
            "fail_if_not_exists": False,
            "type": 0,
        },
    }
    (post,) = server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")
    assert post.headers["authorization"] == f"Bot {TOKEN}"
    assert len(server.created) == 1


async def test_llm_mass_and_role_mentions_ping_nobody(server: DiscordServer) -> None:
    async def rude(message: ChatMessage) -> str:
        return "Hey @everyone and @here, ask <@&987654321>!"

    async with running(server, rude) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1001))
        (body,) = await rig.posts(CHANNEL_ID)
    assert body["allowed_mentions"] == {"parse": [], "users": [HUMAN_ID], "replied_user": True}
    assert body["content"] == "Hey @\u200beveryone and @\u200bhere, ask <@&\u200b987654321>!"
    assert not re.search(r"@(everyone|here)|<@&\d+>", body["content"])


async def test_long_answer_arrives_as_valid_pieces_in_order(server: DiscordServer) -> None:
    code = "```python\n" + "\n".join(f"value_{i} = {i} * 2  # double" for i in range(120)) + "\n```"
    answer = ("A long explanation sentence. " * 50) + "\n\n" + code + "\n\n"
    answer += "Closing remark number one. " * 200
    answer = answer[:5000].rstrip()

    async def long(message: ChatMessage) -> str:
        return answer

    async with running(server, long) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1002))
        await rig.posts(CHANNEL_ID, 3)
        await rig.bus.drain(timeout=10)
        bodies = [r.body for r in server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")]
    assert len(answer) == 5000 and len(bodies) >= 3
    assert all(len(b["content"]) <= 2000 for b in bodies)
    assert all(len(re.findall(r"^```", b["content"], flags=re.M)) % 2 == 0 for b in bodies)
    assert "message_reference" in bodies[0]
    assert all("message_reference" not in b for b in bodies[1:])
    assert bodies[0]["content"].startswith("A long explanation")
    assert bodies[-1]["content"].endswith(answer[-20:])


async def test_another_bots_message_is_not_published(server: DiscordServer) -> None:
    other_bot = {
        "id": "4242",
        "username": "otherbot",
        "discriminator": "0",
        "avatar": None,
        "bot": True,
    }
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1003, "loop?", author=other_bot))
        await server.dispatch("MESSAGE_CREATE", mention(1004, "sentinel"))
        await rig.wait_seen(1)
        await rig.posts(CHANNEL_ID)
        await rig.bus.drain(timeout=10)
    assert [m.id for m in rig.seen] == ["1004"]  # the bot's earlier message never arrived
    assert len(server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")) == 1


async def test_dm_is_answered(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch(
            "MESSAGE_CREATE", load_fixture("discord_message_create_docs_example")["d"]
        )
        (body,) = await rig.posts(CHANNEL_ID)
    (seen,) = rig.seen
    assert seen.is_direct and seen.text == "Supa Hot"
    assert body["content"] == "you said: Supa Hot"
    assert body["message_reference"]["message_id"] == 334385199974967042


async def test_thread_message_uses_the_thread_conversation(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1005, channel_id=THREAD_ID))
        (body,) = await rig.posts(THREAD_ID)
    (seen,) = rig.seen
    assert seen.conversation == ConversationKey(
        platform="discord", channel=str(CHANNEL_ID), thread=str(THREAD_ID)
    )
    assert body["message_reference"]["channel_id"] == THREAD_ID


async def test_typing_is_shown_until_the_answer(server: DiscordServer) -> None:
    async def after_typing(message: ChatMessage) -> str:
        await server.wait_request("POST", f"/channels/{CHANNEL_ID}/typing")
        return "done"

    async with running(server, after_typing) as rig:
        await server.dispatch("MESSAGE_CREATE", mention(1006))
        await rig.posts(CHANNEL_ID)
        await rig.bus.drain(timeout=10)
        assert rig.adapter.typing.active == 0  # stopped by the Reply, not left to time out
    (typing,) = server.requests_to("POST", f"/channels/{CHANNEL_ID}/typing")
    assert typing.headers["authorization"] == f"Bot {TOKEN}"


async def test_ambient_channel_message_is_published_without_typing(server: DiscordServer) -> None:
    async def quiet(message: ChatMessage) -> None:
        return None

    async with running(server, quiet, DISCORD_AMBIENT_CHANNELS=str(CHANNEL_ID)) as rig:
        await server.dispatch("MESSAGE_CREATE", plain_message(1007, "just chatting"))
        (seen,) = await rig.wait_seen(1)
        assert rig.adapter.typing.active == 0
    assert seen.ambient and not seen.addressed
    assert server.requests_to("POST", f"/channels/{CHANNEL_ID}/typing") == []


# -- deletions and commands ----------------------------------------------------------------------
async def test_deletions_publish_message_deleted(server: DiscordServer) -> None:
    async with running(server) as rig:
        await server.dispatch(
            "MESSAGE_DELETE",
            {"id": "2001", "channel_id": str(THREAD_ID), "guild_id": str(GUILD_ID)},
        )
        await server.dispatch(
            "MESSAGE_DELETE_BULK",
            {"ids": ["2003", "2002"], "channel_id": str(CHANNEL_ID), "guild_id": str(GUILD_ID)},
        )
        deleted = await rig.wait_deleted(3)
    thread = ConversationKey(platform="discord", channel=str(CHANNEL_ID), thread=str(THREAD_ID))
    channel = ConversationKey(platform="discord", channel=str(CHANNEL_ID))
    assert deleted == [
        MessageDeleted(conversation=thread, message_id="2001"),
        MessageDeleted(conversation=channel, message_id="2002"),
        MessageDeleted(conversation=channel, message_id="2003"),
    ]


async def test_slash_command_is_answered_ephemerally(server: DiscordServer) -> None:
    async def commands(message: ChatMessage) -> str:
        return "Nothing pinned yet." if message.text == "/pins" else "?"

    async with running(server, commands) as rig:
        (sync,) = server.requests_to("PUT", f"/applications/{BOT_ID}/commands")
        await server.dispatch("INTERACTION_CREATE", slash_interaction("3001", "pins"))
        (followup,) = await server.wait_request(
            "POST", f"/webhooks/{BOT_ID}/interaction-token-secret"
        )
        await rig.bus.drain(timeout=10)
    (group,) = sync.body
    assert group["name"] == "chorus"
    assert {o["name"] for o in group["options"]} == {
        "help",
        "pins",
        "forget",
        "reset",
        "link",
        "unlink",
    }
    by_name = {o["name"]: o for o in group["options"]}
    number, linked = by_name["forget"]["options"]
    assert (number["name"], number["type"], number["required"]) == ("number", 4, False)
    assert (number["min_value"], number["max_value"]) == (1, 1000)
    assert (linked["name"], linked["type"], linked["required"]) == ("linked", 3, False)
    assert [c["value"] for c in linked["choices"]] == ["all", "confirm"]
    assert all(len(c["name"]) <= 100 for c in linked["choices"])  # Discord's limit
    (code,) = by_name["link"]["options"]
    assert (code["name"], code["type"], code["required"]) == ("code", 3, False)
    (seen,) = rig.seen
    assert seen.text == "/pins" and seen.id == "3001" and seen.author.id == str(HUMAN_ID)
    (callback,) = server.requests_to("POST", "/interactions/3001/interaction-token-secret/callback")
    assert callback.body == {"type": 5, "data": {"flags": 64}}  # deferred, ephemeral
    assert followup.body["content"] == "Nothing pinned yet."
    assert followup.body["flags"] & 64
    assert followup.body["allowed_mentions"] == {"parse": []}
    assert server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages") == []


async def test_slash_options_become_the_text_commands_arguments(server: DiscordServer) -> None:
    async def commands(message: ChatMessage) -> str:
        return f"got {message.text} privately={message.private_reply}"

    async with running(server, commands) as rig:
        calls = [
            ("3101", "forget", [{"name": "number", "type": 4, "value": 2}]),
            ("3102", "forget", []),
            ("3106", "forget", [{"name": "linked", "type": 3, "value": "all"}]),
            ("3107", "forget", [{"name": "linked", "type": 3, "value": "confirm"}]),
            ("3103", "link", [{"name": "code", "type": 3, "value": " k7m2pq9x "}]),
            ("3104", "link", []),
            ("3105", "unlink", []),
        ]
        for interaction_id, command, options in calls:
            await server.dispatch(
                "INTERACTION_CREATE", slash_interaction(interaction_id, command, options)
            )
        await server.wait_for(
            lambda: (
                len(server.requests_to("POST", f"/webhooks/{BOT_ID}/interaction-token-secret"))
                >= len(calls)
            )
        )
        await rig.bus.drain(timeout=10)
    texts = {m.id: m.text for m in rig.seen}
    assert texts == {
        "3101": "/forget 2",
        "3102": "/forget",
        "3106": "/forget all",
        "3107": "/forget confirm",
        "3103": "/link k7m2pq9x",
        "3104": "/link",
        "3105": "/unlink",
    }
    assert all(m.private_reply for m in rig.seen), "answered ephemerally: a code stays private"
