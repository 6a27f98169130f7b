"""Table tests of ``adapters.discord.convert`` on documented Discord payloads.

Each payload goes through discord.py's own gateway parser (a real ``ConnectionState``, fed the
fixture guild) so the conversions see exactly the objects the adapter sees at runtime.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime
from typing import Any

import discord
import pytest
from discord.state import ConnectionState
from discord.user import ClientUser

from adapters.discord import convert
from adapters.discord.convert import Policy
from bot.events import AttachmentKind, ConversationKey, MessageDeleted, Reply, Role
from bot.settings import ConfigError, load_settings
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    HUMAN_ID,
    MOD_ROLE_ID,
    THREAD_ID,
    bot_mention,
    guild_create,
    load_fixture,
    plain_message,
)

POLICY = Policy(bot_id=BOT_ID)
OTHER_BOT = {
    "id": "4242",
    "username": "otherbot",
    "discriminator": "0",
    "avatar": None,
    "bot": True,
}


class Wire:
    """discord.py's parser with a captured dispatch (no network, no client)."""

    def __init__(self, *, owner_id: int = 1) -> None:
        self.events: list[tuple[str, tuple[Any, ...]]] = []
        self.state = ConnectionState(
            dispatch=lambda name, *args: self.events.append((name, args)),
            handlers={},
            hooks={},
            http=None,  # type: ignore[arg-type]  # nothing is sent
            intents=discord.Intents.default(),
        )
        user = load_fixture("discord_ready_docs_user")["d"]["user"]
        self.state.user = ClientUser(state=self.state, data=user)
        self.state._add_guild_from_data(guild_create(owner_id=owner_id))  # type: ignore[arg-type]

    def message(self, data: dict[str, Any]) -> discord.Message:
        self.state.parse_message_create(copy.deepcopy(data))  # type: ignore[arg-type]
        name, args = self.events.pop()
        assert name == "message"
        message: discord.Message = args[0]
        return message


def chat(data: dict[str, Any], policy: Policy = POLICY, **wire: Any) -> Any:
    return convert.message_to_chat(Wire(**wire).message(data), policy)


# -- inbound: the documented payloads ------------------------------------------------------------
def test_composed_reply_fixture_is_an_addressed_message_with_an_image() -> None:
    msg = chat(load_fixture("discord_message_create_reply")["d"])
    assert msg.id == "334385199974967099"
    assert msg.conversation == ConversationKey(platform="discord", channel=str(CHANNEL_ID))
    assert msg.author.id == str(HUMAN_ID)
    assert msg.author.display_name == "NOT API SUPPORT"  # the guild nickname
    assert msg.author.roles == frozenset({Role.MEMBER})
    assert not msg.author.is_bot
    assert msg.text == "what does this say?"  # the bot's leading mention removed
    assert msg.mentions_bot and msg.reply_to_bot and not msg.is_direct and not msg.ambient
    assert msg.reply_to_id == "334385199974967042"
    # discord.py dates a message by its snowflake id (the composed fixture's id is 3 min older
    # than its "timestamp"; real ids always agree with it)
    assert msg.sent_at == datetime(2017, 7, 11, 17, 27, 24, 250000, tzinfo=UTC)
    (image,) = msg.attachments
    assert image.kind is AttachmentKind.IMAGE
    assert image.mime == "image/png" and image.filename == "IMG.jpg" and image.size == 660521
    assert image.url is not None and image.url.startswith("https://cdn.discordapp.com/")


def test_docs_example_message_without_guild_is_a_dm() -> None:
    msg = chat(load_fixture("discord_message_create_docs_example")["d"])
    assert msg.is_direct and msg.addressed and not msg.ambient
    assert msg.text == "Supa Hot"
    assert msg.author.id == "53908099506183680" and msg.author.roles == frozenset()
    assert msg.conversation.channel == "290926798999357250" and msg.conversation.thread is None


def _hikari_message() -> dict[str, Any]:
    data: dict[str, Any] = load_fixture("discord_message_create")["d"]
    # The fixture's waveform is not base64 and discord.py 2.7.1 refuses it (see .src.txt).
    del data["attachments"][0]["waveform"]
    return data


def test_hikari_fixture_from_a_webhook_bot_is_ignored() -> None:
    assert chat(_hikari_message()) is None
    # answering bots is opt-in, and even then only where the bot would answer anyone
    assert chat(_hikari_message(), Policy(bot_id=BOT_ID, answer_bots=True)) is None


def test_hikari_fixture_is_published_when_bots_are_answered_in_an_always_channel() -> None:
    policy = Policy(bot_id=BOT_ID, answer_bots=True, always_answer_channels=frozenset({456}))
    msg = chat(_hikari_message(), policy)
    assert msg.author.is_bot and msg.author.id == "115590097100865541"
    assert not msg.ambient and not msg.is_direct  # guild 678 is not cached, still not a DM
    assert msg.reply_to_id == "306588351130107906"
    assert msg.attachments[0].kind is AttachmentKind.IMAGE


# -- inbound: who is answered where --------------------------------------------------------------
MENTION = f"<@{BOT_ID}> hello"


@pytest.mark.parametrize(
    ("data", "policy", "expected"),
    [
        pytest.param(plain_message(1, "hello all"), POLICY, None, id="unaddressed-ignored"),
        pytest.param(
            plain_message(1, "hello all"),
            Policy(bot_id=BOT_ID, ambient_channels=frozenset({CHANNEL_ID})),
            "ambient",
            id="ambient-channel",
        ),
        pytest.param(
            plain_message(1, "hello all"),
            Policy(bot_id=BOT_ID, always_answer_channels=frozenset({CHANNEL_ID})),
            "answered",
            id="always-answer-channel",
        ),
        pytest.param(
            plain_message(1, ""),  # what arrives without the Message Content intent
            Policy(bot_id=BOT_ID, ambient_channels=frozenset({CHANNEL_ID})),
            None,
            id="ambient-without-content-dropped",
        ),
        pytest.param(
            plain_message(1, MENTION, mentions=[bot_mention()]), POLICY, "answered", id="mention"
        ),
        pytest.param(
            plain_message(1, MENTION, mentions=[bot_mention()]),
            Policy(bot_id=BOT_ID, allowed_channels=frozenset({999})),
            None,
            id="mention-outside-allowlist",
        ),
        pytest.param(
            plain_message(1, MENTION, mentions=[bot_mention()]),
            Policy(bot_id=BOT_ID, allowed_channels=frozenset({CHANNEL_ID})),
            "answered",
            id="mention-inside-allowlist",
        ),
        pytest.param(
            plain_message(1, "hi", guild=False),
            Policy(bot_id=BOT_ID, allowed_channels=frozenset({999})),
            "answered",
            id="dm-not-subject-to-allowlist",
        ),
        pytest.param(
            plain_message(1, MENTION, author=OTHER_BOT, mentions=[bot_mention()]),
            POLICY,
            None,
            id="other-bot-ignored",
        ),
        pytest.param(
            plain_message(1, MENTION, author=OTHER_BOT, mentions=[bot_mention()]),
            Policy(bot_id=BOT_ID, answer_bots=True),
            "answered",
            id="other-bot-answered-when-enabled",
        ),
        pytest.param(
            plain_message(
                1, MENTION, author=bot_mention() | {"member": None}, mentions=[bot_mention()]
            ),
            Policy(bot_id=BOT_ID, answer_bots=True, always_answer_channels=frozenset({CHANNEL_ID})),
            None,
            id="own-message-never",
        ),
        pytest.param(
            plain_message(1, MENTION, mentions=[bot_mention()]) | {"type": 7},
            POLICY,
            None,
            id="system-message-ignored",
        ),
    ],
)
def test_engagement_table(data: dict[str, Any], policy: Policy, expected: str | None) -> None:
    msg = chat(data, policy)
    if expected is None:
        assert msg is None
    else:
        assert msg is not None
        assert msg.ambient is (expected == "ambient")


def test_reply_to_a_human_is_not_a_reply_to_the_bot() -> None:
    data = load_fixture("discord_message_create_reply")["d"]
    data["referenced_message"]["author"] = {
        "id": "777",
        "username": "someone",
        "discriminator": "0",
        "avatar": None,
    }
    data["mentions"] = []
    data["content"] = "what does this say?"
    assert chat(data) is None  # neither mention nor reply to the bot
    msg = chat(data, Policy(bot_id=BOT_ID, ambient_channels=frozenset({CHANNEL_ID})))
    assert msg.reply_to_id == "334385199974967042" and not msg.reply_to_bot and msg.ambient


def test_thread_message_is_its_own_conversation() -> None:
    data = plain_message(5, MENTION, channel_id=THREAD_ID, mentions=[bot_mention()])
    msg = chat(data)
    assert msg.conversation == ConversationKey(
        platform="discord", channel=str(CHANNEL_ID), thread=str(THREAD_ID)
    )
    # a channel list may name the parent channel for all its threads
    policy = Policy(bot_id=BOT_ID, ambient_channels=frozenset({CHANNEL_ID}))
    assert chat(plain_message(6, "hi", channel_id=THREAD_ID), policy).ambient


def test_roles_owner_and_moderator() -> None:
    mention = [bot_mention()]
    owner = chat(plain_message(1, MENTION, mentions=mention), owner_id=HUMAN_ID)
    assert owner.author.roles == frozenset({Role.MEMBER, Role.OWNER, Role.MODERATOR})
    mod = chat(plain_message(1, MENTION, mentions=mention, roles=[str(MOD_ROLE_ID)]))
    assert mod.author.roles == frozenset({Role.MEMBER, Role.MODERATOR})
    assert mod.author.is_moderator


def test_other_mentions_become_names_and_files_are_files() -> None:
    friend = {
        "id": "31337",
        "username": "friend",
        "discriminator": "0",
        "avatar": None,
        "global_name": "Friend",
    }
    data = plain_message(
        1, f"<@{BOT_ID}> ask <@31337> and <@!{BOT_ID}>", mentions=[bot_mention(), friend]
    )
    data["attachments"] = [
        {
            "id": "1",
            "filename": "a.pdf",
            "size": 3,
            "url": "https://x/a.pdf",
            "proxy_url": "https://x/a.pdf",
            "content_type": "application/pdf",
        }
    ]
    msg = chat(data)
    assert msg.text == "ask @Friend and @Nelly"
    assert msg.attachments[0].kind is AttachmentKind.FILE
    assert msg.attachments[0].mime == "application/pdf"


def test_deletions_map_threads_and_bulk() -> None:
    assert convert.deletions(THREAD_ID, CHANNEL_ID, [3, 2]) == [
        MessageDeleted(
            conversation=ConversationKey(
                platform="discord", channel=str(CHANNEL_ID), thread=str(THREAD_ID)
            ),
            message_id=mid,
        )
        for mid in ("2", "3")
    ]
    wire = Wire()
    wire.state.parse_message_delete(
        {"id": "9", "channel_id": str(CHANNEL_ID), "guild_id": str(GUILD_ID)}
    )
    _, (raw,) = wire.events.pop()
    (event,) = convert.deletions(raw.channel_id, None, [raw.message_id])
    assert event.conversation.channel == str(CHANNEL_ID) and event.message_id == "9"


# -- outbound ------------------------------------------------------------------------------------
def _reply(text: str, **kw: Any) -> Reply:
    conversation = kw.pop("conversation", ConversationKey(platform="discord", channel="10"))
    return Reply(conversation=conversation, text=text, **kw)


def test_mass_and_role_mentions_are_neutralised() -> None:
    (piece,) = convert.reply_to_outgoing(
        _reply("@everyone @here <@&123> hi <@55>", reply_to_id="77", addressed_user_ids=("55",))
    )
    assert "@everyone" not in piece.content and "@here" not in piece.content
    assert "<@&123>" not in piece.content
    assert piece.content == "@\u200beveryone @\u200bhere <@&\u200b123> hi <@55>"
    assert piece.reply_to == 77 and piece.mention_user_ids == (55,) and piece.channel_id == 10
    assert convert.allowed_mentions(piece.mention_user_ids).to_dict() == {
        "parse": [],
        "users": [55],
        "replied_user": True,
    }


def test_long_answer_with_code_is_split_into_valid_pieces() -> None:
    code = "```python\n" + "\n".join(f"print({i})  # line {i}" for i in range(200)) + "\n```"
    text = ("Intro paragraph. " * 40) + "\n\n" + code + "\n\n" + ("Outro words here. " * 60)
    text = text[:5000] if len(text) > 5000 else text
    pieces = convert.reply_to_outgoing(_reply(text, reply_to_id="1"))
    assert len(pieces) >= 3
    assert all(len(p.content) <= convert.MESSAGE_LIMIT for p in pieces)
    assert all(len(re.findall(r"^```", p.content, flags=re.M)) % 2 == 0 for p in pieces)
    assert [p.reply_to for p in pieces] == [1] + [None] * (len(pieces) - 1)


def test_thread_reply_targets_the_thread_and_odd_ids_are_dropped() -> None:
    key = ConversationKey(platform="discord", channel="10", thread="20")
    (piece,) = convert.reply_to_outgoing(
        _reply("hi", conversation=key, reply_to_id="console-x", addressed_user_ids=("u1", "5"))
    )
    assert piece.channel_id == 20 and piece.reply_to is None and piece.mention_user_ids == (5,)
    assert convert.reply_to_outgoing(_reply("   ")) == []


# -- settings ------------------------------------------------------------------------------------
def test_settings_parse_channel_lists_and_validate_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "t")
    monkeypatch.setenv("DISCORD_AMBIENT_CHANNELS", "1, 2,3")
    monkeypatch.setenv("DISCORD_API_BASE_URL", "http://127.0.0.1:9/api/v10/")
    settings = load_settings().discord
    assert settings.ambient_channels == frozenset({1, 2, 3})
    assert settings.api_base_url == "http://127.0.0.1:9/api/v10"
    assert settings.allowed_channels == frozenset() and not settings.message_content_intent
    monkeypatch.setenv("DISCORD_API_BASE_URL", "http://127.0.0.1:9/")
    with pytest.raises(ConfigError, match="DISCORD_API_BASE_URL.*/api/v10"):
        load_settings()
    monkeypatch.delenv("DISCORD_API_BASE_URL")
    monkeypatch.setenv("DISCORD_ALLOWED_CHANNELS", "general")
    with pytest.raises(ConfigError, match="DISCORD_ALLOWED_CHANNELS"):
        load_settings()


def test_a_reply_to_the_bot_without_its_ping_and_without_content_is_not_answered_blind() -> None:
    """Without the Message Content intent, a reply to the bot whose author switched the reply
    ping off arrives with empty content: there is nothing to answer."""
    data = load_fixture("discord_message_create_reply")["d"]
    data["mentions"] = []
    data["content"] = ""
    data["attachments"] = []
    assert chat(data) is None
    data["content"] = "and what about this?"  # with the intent on, the same reply is read
    msg = chat(data)
    assert msg.reply_to_bot and not msg.mentions_bot and msg.text == "and what about this?"


def test_a_bare_mention_is_still_a_message() -> None:
    data = load_fixture("discord_message_create_reply")["d"]
    data["content"] = f"<@{BOT_ID}>"
    data["attachments"] = []
    msg = chat(data)
    assert msg is not None and msg.mentions_bot and msg.text == ""


def test_values_discord_py_copies_unchecked_are_read_defensively() -> None:
    """discord.py copies these fields without checking their type; a bad attachment is left
    out alone, a name of another type falls back to the id, a text that is not one is refused."""
    data = load_fixture("discord_message_create_reply")["d"]
    good = data["attachments"][0]
    data["attachments"] = [dict(good, id="2", url=None), good, dict(good, id="3", size="big")]
    data["member"] = dict(data["member"], nick=None)
    data["author"] = dict(data["author"], username=["not", "a", "name"], global_name=None)
    msg = chat(data)
    assert [a.filename for a in msg.attachments] == ["IMG.jpg"]  # the readable one is kept
    assert msg.author.display_name == str(HUMAN_ID)
    for content in (None, 42, ["text"]):
        with pytest.raises(ValueError, match="content"):
            chat(dict(data, content=content))
    with pytest.raises(ValueError, match="author"):
        chat({k: v for k, v in data.items() if k not in ("author", "member")})
