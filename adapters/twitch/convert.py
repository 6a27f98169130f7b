"""Twitch EventSub events <-> Chorus events. Pure functions: no I/O, no clock but the event's.

Inbound, the input is the twitchio 3 model twitchio builds from the EventSub ``notification``
(``twitchio.ChatMessage``, ``ChatMessageDelete``, ``ChannelChatClearUserMessages``,
``ChannelPointsRedemptionAdd``; chat notices such as subs and raids are ``notices.py``'s): the tests
build the same objects from the recorded payloads with ``create_event_instance``, as twitchio's
websocket does. Outbound, a ``Reply`` becomes the bodies of Send Chat Message calls.

Twitch chat is one line of plain text of at most 500 characters in a fast-moving room, so:

- Markdown is flattened: ``**bold**``/backticks/headings lose their marks, ``[text](url)``
  becomes ``text (url)``, bullets become ``•``, every line break becomes a space;
- the text is split with ``split_text`` and at most ``max_pieces`` (2) messages go out; what is
  left is dropped and the last piece ends with an ellipsis;
- a message that would start with ``/`` or ``.`` would be run as a chat command (``/ban``,
  ``.timeout``; Helix still honours ``/me``). Twitch trims leading whitespace and invisible
  format characters are not a safe guard, so the first character is swapped for a look-alike
  that no command parser treats as a prefix: ``/`` -> ``∕`` (U+2215 DIVISION SLASH), ``.`` ->
  ``․`` (U+2024 ONE DOT LEADER). Both are ordinary visible symbols Twitch keeps;
- ``@name`` stays a mention only for the users the reply is addressed to; any other ``@`` is
  dropped (``@everyone`` means nothing on Twitch, but a stray ``@login`` pings a real person).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from twitchio import (
    ChannelChatClearUserMessages,
    ChannelPointsRedemptionAdd,
    ChatMessageBadge,
    ChatMessageDelete,
    StreamOffline,
    StreamOnline,
)
from twitchio import ChatMessage as TwitchChatMessage

from bot.events import (
    Author,
    ChannelEvent,
    ChannelEventKind,
    ChatMessage,
    ConversationKey,
    MessageDeleted,
    Reply,
    Role,
    StreamEvent,
    StreamEventKind,
    utcnow,
)
from bot.platform.textsplit import split_text

PLATFORM = "twitch"
MESSAGE_LIMIT = 500
ELLIPSIS = "…"

_OWNER_BADGES = frozenset({"broadcaster"})
_MOD_BADGES = frozenset({"moderator", "lead_moderator"})
_SUBSCRIBER_BADGES = frozenset({"subscriber", "founder", "vip"})


@dataclass(frozen=True, slots=True)
class BotIdentity:
    id: str
    login: str


@dataclass(frozen=True, slots=True)
class SendArgs:
    """The body of one ``POST /helix/chat/messages`` (``sender_id`` is added by the sender)."""

    broadcaster_id: str
    message: str
    reply_parent_message_id: str | None = None


# -- inbound ------------------------------------------------------------------------------------
class Malformed(ValueError):
    """twitchio parsed the event, but a field Chorus needs is missing or of another type."""


def _text(value: object, field: str) -> str:
    """``value`` if it is a non-empty string (twitchio does not check types), else Malformed."""
    if isinstance(value, str) and value:
        return value
    raise Malformed(f"{field} is missing or not a string")


def roles(badges: Iterable[ChatMessageBadge], *, is_broadcaster: bool = False) -> frozenset[Role]:
    set_ids = {badge.set_id for badge in badges if isinstance(badge.set_id, str)}
    found: set[Role] = set()
    if is_broadcaster or set_ids & _OWNER_BADGES:
        found.add(Role.OWNER)
    if set_ids & _MOD_BADGES:
        found.add(Role.MODERATOR)
    if set_ids & _SUBSCRIBER_BADGES:
        found.add(Role.SUBSCRIBER)
    return frozenset(found)


def is_moderator_badge(event: TwitchChatMessage) -> bool:
    """Whether the chatter is the broadcaster or a moderator in this channel (for send limits)."""
    return bool(
        roles(event.badges, is_broadcaster=_is_broadcaster(event)) & {Role.OWNER, Role.MODERATOR}
    )


def is_own(event: TwitchChatMessage, bot: BotIdentity) -> bool:
    return event.chatter.id == bot.id


def chat_message(
    event: TwitchChatMessage, *, bot: BotIdentity, ambient: bool = True
) -> ChatMessage | None:
    """The ``ChatMessage`` for a ``channel.chat.message`` event, or None when it must be ignored.

    Ignored: the bot's own messages, messages relayed from another channel of a shared chat
    session (the bot hears them in their own channel when it is there), and, when ``ambient`` is
    off, every message that does not address the bot (unless it cheers Bits: a cheer is a stream
    event, ``stream_event``, whatever its text). ``Malformed`` when an id or the text is missing
    or of another type.
    """
    if is_own(event, bot):
        return None
    chatter_id = _text(event.chatter.id, "chatter_user_id")
    channel = _text(event.broadcaster.id, "broadcaster_user_id")
    message_id = _text(event.id, "message_id")
    if not isinstance(event.text, str):
        raise Malformed("message.text is missing or not a string")
    source = event.source_broadcaster
    if source is not None and source.id != event.broadcaster.id:
        return None
    reply = event.reply
    reply_to_bot = reply is not None and reply.parent_user.id == bot.id
    parent_id = reply.parent_message_id if reply is not None else None
    text = _without_reply_prefix(event)
    mentions_bot = mentions(event.fragments, text, bot)
    addressed = mentions_bot or reply_to_bot
    chatter = event.chatter
    names = [n for n in (chatter.display_name, chatter.name) if isinstance(n, str) and n]
    cheer = _cheer(event, chatter_id, (names or [chatter_id])[0])
    if not addressed and not ambient and cheer is None:
        return None
    return ChatMessage(
        platform=PLATFORM,
        id=message_id,
        conversation=ConversationKey(platform=PLATFORM, channel=channel),
        author=Author(
            id=chatter_id,
            display_name=(names or [chatter_id])[0],
            roles=roles(event.badges, is_broadcaster=_is_broadcaster(event)),
        ),
        text=text,
        mentions_bot=mentions_bot,
        reply_to_id=parent_id if isinstance(parent_id, str) and parent_id else None,
        reply_to_bot=reply_to_bot,
        sent_at=event.timestamp or utcnow(),
        ambient=not addressed and ambient,
        stream_event=cheer,
        server=_login(event.broadcaster),  # chorus.toml's scopes: twitch:LOGIN
    )


def _cheer(event: TwitchChatMessage, chatter_id: str, name: str) -> StreamEvent | None:
    """Bits cheered in the message (``event.cheer``, null without a cheer) as a stream event."""
    cheer = event.cheer
    bits = getattr(cheer, "bits", None)
    if cheer is None or not isinstance(bits, int) or bits <= 0:
        return None
    return StreamEvent(kind=StreamEventKind.CHEER, user_id=chatter_id, user_name=name, bits=bits)


def mentions(fragments: Iterable[Any], text: str, bot: BotIdentity) -> bool:
    """Whether a message (its fragments, or its text) mentions the bot."""
    tagged = any(getattr(getattr(f, "mention", None), "id", None) == bot.id for f in fragments)
    return tagged or _mentions_login(text, bot.login)


def message_deleted(event: ChatMessageDelete) -> MessageDeleted:
    return MessageDeleted(
        conversation=ConversationKey(platform=PLATFORM, channel=event.broadcaster.id),
        message_id=event.message_id,
        author_id=event.user.id,
    )


def user_cleared(event: ChannelChatClearUserMessages) -> MessageDeleted:
    """A ban or timeout purged all of one user's messages in the channel."""
    return MessageDeleted(
        conversation=ConversationKey(platform=PLATFORM, channel=event.broadcaster.id),
        author_id=event.user.id,
    )


def _login(user: object) -> str | None:
    login = getattr(user, "name", None)
    return login.lower()[:256] if isinstance(login, str) and login else None


def _is_broadcaster(event: TwitchChatMessage) -> bool:
    return event.chatter.id == event.broadcaster.id


def _without_reply_prefix(event: TwitchChatMessage) -> str:
    """The text without the ``@parent`` Twitch puts in front of every reply."""
    text = event.text
    if event.reply is not None and isinstance(event.reply.parent_user.name, str):
        prefix = f"@{event.reply.parent_user.name}"
        if text.lower().startswith(prefix.lower()):
            stripped = text[len(prefix) :].lstrip()
            return stripped or text
    return text


def _mentions_login(text: str, login: str) -> bool:
    if not login:
        return False
    return re.search(rf"(?<![\w@])@{re.escape(login)}\b", text, re.IGNORECASE) is not None


# -- outbound ----------------------------------------------------------------------------------
_FENCE = re.compile(r"^\s*(```+|~~~+).*$", re.MULTILINE)
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE)
_QUOTE = re.compile(r"^\s*>\s?", re.MULTILINE)
_BULLET = re.compile(r"^\s*[-*+]\s+", re.MULTILINE)
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$", re.MULTILINE)
_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_LINK = re.compile(r"\[([^\]\n]+)\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<(https?://[^\s<>]+)>")
_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_MENTION = re.compile(r"(?<![\w@])@(\w+)")
_SPACE = re.compile(r"\s+")
_COMMAND_LOOKALIKE = {"/": "\u2215", ".": "\u2024"}


def to_plain(text: str) -> str:
    """Markdown -> one line of plain chat text."""
    text = _FENCE.sub("", text.replace("\r\n", "\n"))
    text = _RULE.sub("", text)
    text = _HEADING.sub("", text)
    text = _QUOTE.sub("", text)
    text = _BULLET.sub("• ", text)
    text = _IMAGE.sub(lambda m: _link(m.group(1), m.group(2)), text)
    text = _LINK.sub(lambda m: _link(m.group(1), m.group(2)), text)
    text = _AUTOLINK.sub(r"\1", text)
    text = _INLINE_CODE.sub(lambda m: m.group(2).strip(), text)
    text = _BOLD.sub(r"\2", text)
    text = _ITALIC.sub(r"\1", text)
    text = _STRIKE.sub(r"\1", text)
    return _SPACE.sub(" ", text).strip()


def _link(label: str, url: str) -> str:
    label = label.strip()
    return url if not label or label == url else f"{label} ({url})"


def sanitise_mentions(text: str, allowed_logins: Iterable[str]) -> str:
    """Keep ``@login`` only for ``allowed_logins``; every other ``@`` is dropped."""
    allowed = {login.lower() for login in allowed_logins}
    return _MENTION.sub(lambda m: m.group(0) if m.group(1).lower() in allowed else m.group(1), text)


def neutralise_command(text: str) -> str:
    """Never start a message with a chat-command prefix (see the module docstring)."""
    text = text.lstrip()
    if text and text[0] in _COMMAND_LOOKALIKE:
        return _COMMAND_LOOKALIKE[text[0]] + text[1:]
    return text


def reply_to_sends(
    reply: Reply,
    *,
    logins: Mapping[str, str] | None = None,
    max_pieces: int = 2,
    limit: int = MESSAGE_LIMIT,
) -> list[SendArgs]:
    """The Send Chat Message bodies for ``reply``: plain, short, safe; the first one replies.

    ``logins`` maps user ids to logins; only ``reply.addressed_user_ids`` found there may be
    ``@``-mentioned.
    """
    known = logins or {}
    allowed = [known[uid] for uid in reply.addressed_user_ids if uid in known]
    text = sanitise_mentions(to_plain(reply.text), allowed)
    # The look-alike swap keeps the length, so pieces stay within ``limit``.
    pieces = [p for p in (neutralise_command(p) for p in split_text(text, limit)) if p]
    if len(pieces) > max_pieces:
        pieces = pieces[:max_pieces]
        last = pieces[-1].rstrip(" .,;:" + ELLIPSIS)
        pieces[-1] = last[: limit - len(ELLIPSIS)].rstrip() + ELLIPSIS
    return [
        SendArgs(
            broadcaster_id=reply.conversation.channel,
            message=piece,
            reply_parent_message_id=reply.reply_to_id if i == 0 else None,
        )
        for i, piece in enumerate(pieces)
    ]


def stream_state(event: StreamOnline | StreamOffline, *, online: bool) -> ChatMessage:
    """``stream.online`` / ``stream.offline`` as a text-less message carrying a
    ``ChannelEvent`` (its author the broadcaster), for the plugins' handlers; never answered."""
    broadcaster = event.broadcaster
    name = broadcaster.display_name or broadcaster.name or broadcaster.id
    kind = ChannelEventKind.STREAM_ONLINE if online else ChannelEventKind.STREAM_OFFLINE
    stream = getattr(event, "id", None) if online else None
    return ChatMessage(
        platform=PLATFORM,
        id=f"stream-{kind.value}-{stream or uuid.uuid4().hex}",
        conversation=ConversationKey(platform=PLATFORM, channel=broadcaster.id),
        author=Author(id=broadcaster.id, display_name=str(name)[:256]),
        text="",
        server=_login(broadcaster),
        channel_event=ChannelEvent(kind=kind),
    )


def redemption(
    event: ChannelPointsRedemptionAdd, *, bot: BotIdentity, ambient: bool
) -> ChatMessage:
    """A channel-point reward redeemed: a line from the viewer (their text, if the reward asks
    for one: user data, screened like any line) carrying a ``REDEMPTION`` stream event."""
    viewer = _text(event.user.id, "user_id")
    name = event.user.display_name or event.user.name or viewer
    reward = event.reward
    text = event.user_input if isinstance(event.user_input, str) else ""
    mentions_bot = _mentions_login(text, bot.login)
    cost = reward.cost if isinstance(reward.cost, int) and reward.cost >= 0 else None
    is_owner = viewer == event.broadcaster.id
    return ChatMessage(
        platform=PLATFORM,
        id=f"redemption-{_text(event.id, 'id')}",
        conversation=ConversationKey(platform=PLATFORM, channel=event.broadcaster.id),
        author=Author(
            id=viewer,
            display_name=str(name)[:256],
            roles=frozenset({Role.OWNER}) if is_owner else frozenset(),
        ),
        text=text,
        mentions_bot=mentions_bot,
        sent_at=event.redeemed_at or utcnow(),
        ambient=not mentions_bot and ambient,
        stream_event=StreamEvent(
            kind=StreamEventKind.REDEMPTION,
            user_id=viewer,
            user_name=str(name)[:256],
            reward=str(reward.title or "")[:256],
            reward_id=reward.id or None,
            cost=cost,
        ),
        server=_login(event.broadcaster),
    )
