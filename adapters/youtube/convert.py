"""YouTube Data API v3 live chat payloads <-> Chorus events (pure: no I/O, no clock).

Inbound, one ``liveChatMessage`` resource (an item of ``liveChatMessages.list``) becomes:

- ``textMessageEvent`` -> ``ChatMessage``; identity is the author's channel id (display names
  are not unique);
- the paid and membership types -> a ``ChatMessage`` carrying a ``StreamEvent``, its text the
  comment the viewer wrote (a mention of the bot in it is a mention), or empty:
  ``superChatEvent`` -> ``super_chat`` and ``superStickerEvent`` -> ``super_sticker`` (``amount``
  = ``amountDisplayString``, ``amount_micros``, ``currency``), ``newSponsorEvent`` -> ``sub``
  (``tier`` = the level name), ``memberMilestoneChatEvent`` -> ``resub`` (``months`` =
  ``memberMonth``), ``membershipGiftingEvent`` -> ``gift_sub`` (``count`` =
  ``giftMembershipsCount``, ``gift_id`` = the item's id) and each recipient's
  ``giftMembershipReceivedEvent`` -> ``gift_sub`` with ``recipient_*`` (the item's author),
  the gifter from ``gifterChannelId`` and ``gift_id`` = ``associatedMembershipGiftingMessageId``,
  so the policy counts the burst once (bot/engagement/thanks.py). Every item has its own id, so the
  adapter's de-duplication by id never drops a recipient's part;
- ``messageDeletedEvent`` -> ``MessageDeleted(message_id=...)``;
- ``userBannedEvent`` -> ``MessageDeleted(author_id=...)``: a banned user's lines leave the
  bot's context too;
- everything else (polls, gifts, mode changes) -> None.

``stream_state`` makes the text-less ``ChatMessage`` carrying a ``ChannelEvent`` that tells the
plugins a broadcast's chat began (``stream_online``) or ended (``stream_offline``); its id is
the chat's, so a restarted adapter announcing the same broadcast again is recognisable.

A streamed page (gRPC ``streamList``, stream_list.py) is turned into this same REST JSON first, so
both readers' items convert alike.

A page (``read_page``) and an item are read defensively: a field of the wrong type counts as
missing, an item the bot needs but cannot read raises ``Malformed`` (the adapter logs one line
and drops that item alone), and a malformed page keeps what is readable of it.

The conversation is the live chat (``channel`` = ``liveChatId``), which is also what a send
needs. YouTube has no replies or DMs, so a message is addressed only by an ``@Name`` mention of
the bot's channel; the rest are published as ambient (or answered, or dropped, per settings).

Outbound, a ``Reply`` becomes at most two plain-text pieces of at most 200 characters (the
``liveChatMessages.insert`` limit; a live chat scrolls fast, so long answers are cut with an
ellipsis rather than flooding it). Markdown is flattened, and an ``@`` that would mention
someone the reply is not addressed to is defused with a word joiner.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

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
)
from bot.platform.textsplit import split_text

PLATFORM = "youtube"
MESSAGE_LIMIT = 200
_WORD_JOINER = "\u2060"
_ELLIPSIS = "…"

Unaddressed = Literal["ambient", "answer", "ignore"]


class Malformed(ValueError):
    """An item (or page) lacks what converting it needs; the reason names the field."""


@dataclass(frozen=True)
class Page:
    """What the adapter uses of a ``liveChatMessageListResponse``, each part checked."""

    items: tuple[Mapping[str, Any], ...] = ()
    next_page_token: str | None = None
    polling_interval: float | None = None  # seconds
    offline_at: str | None = None
    problems: tuple[str, ...] = ()  # what was malformed (and skipped), for one log line


def read_page(page: Mapping[str, Any]) -> Page:
    """The readable parts of a list response; ``problems`` names what was not."""
    problems = []
    raw_items = page.get("items")
    if raw_items is None:
        raw_items = []
    elif not isinstance(raw_items, list):
        problems.append("items is not a list")
        raw_items = []
    items = tuple(item for item in raw_items if isinstance(item, Mapping))
    if len(items) < len(raw_items):
        problems.append(f"{len(raw_items) - len(items)} items are not objects")
    token = page.get("nextPageToken")
    if token is not None and not _text(token):
        problems.append("nextPageToken is not a string")
    interval = page.get("pollingIntervalMillis")
    seconds = None
    if isinstance(interval, int | float) and not isinstance(interval, bool) and interval > 0:
        seconds = min(float(interval) / 1000, 3600.0)
    elif interval is not None:
        problems.append("pollingIntervalMillis is not a positive number")
    offline = page.get("offlineAt")
    if offline is not None and not _text(offline):
        problems.append("offlineAt is not a string")
    return Page(items, _text(token), seconds, _text(offline), tuple(problems))


def _obj(value: object) -> Mapping[str, Any]:
    """``value`` if it is a JSON object, else an empty one (a field of the wrong type)."""
    return value if isinstance(value, Mapping) else {}


def _text(value: object) -> str | None:
    """``value`` if it is a non-empty string, else None."""
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class ChatContext:
    """What converting one chat's items needs to know about the bot and the chat."""

    live_chat_id: str
    bot_channel_id: str
    bot_names: tuple[str, ...]  # display name, handle (``@`` optional)
    unaddressed: Unaddressed = "ambient"

    @property
    def conversation(self) -> ConversationKey:
        return ConversationKey(platform=PLATFORM, channel=self.live_chat_id)


def stream_state(ctx: ChatContext, *, online: bool) -> ChatMessage:
    """The bot began (``online``) or stopped following a broadcast's live chat, as a text-less
    message carrying a ``ChannelEvent`` (its author the channel the bot reads as), for the
    plugins' handlers; never answered."""
    kind = ChannelEventKind.STREAM_ONLINE if online else ChannelEventKind.STREAM_OFFLINE
    name = ctx.bot_names[0] if ctx.bot_names else ctx.bot_channel_id
    return ChatMessage(
        platform=PLATFORM,
        id=f"stream-{kind.value}-{ctx.live_chat_id}"[:256],
        conversation=ctx.conversation,
        author=Author(id=ctx.bot_channel_id, display_name=name[:256]),
        text="",
        channel_event=ChannelEvent(kind=kind),
    )


def to_event(item: Mapping[str, Any], ctx: ChatContext) -> ChatMessage | MessageDeleted | None:
    """The event for one ``liveChatMessage`` resource; None for what the bot ignores.

    Raises ``Malformed`` for an item that lacks what its event needs; the adapter logs it with
    its id and drops it.
    """
    snippet = item.get("snippet")
    if not isinstance(snippet, Mapping):
        raise Malformed("an item without a snippet object")
    kind = snippet.get("type")
    if kind == "messageDeletedEvent":
        deleted = _text(_obj(snippet.get("messageDeletedDetails")).get("deletedMessageId"))
        if deleted is None:
            raise Malformed("messageDeletedEvent without a deletedMessageId")
        return MessageDeleted(conversation=ctx.conversation, message_id=deleted)
    if kind == "userBannedEvent":
        banned = _obj(_obj(snippet.get("userBannedDetails")).get("bannedUserDetails"))
        channel = _text(banned.get("channelId"))
        if channel is None:
            raise Malformed("userBannedEvent without the banned user's channelId")
        return MessageDeleted(conversation=ctx.conversation, author_id=channel)
    text = _message_text(kind, snippet) or ""
    if not (isinstance(kind, str) and kind in _EVENT_KINDS) and not text.strip():
        return None
    details = _obj(item.get("authorDetails"))
    author_id = _text(details.get("channelId")) or _text(snippet.get("authorChannelId"))
    message_id = _text(item.get("id"))
    if author_id is None or message_id is None:
        raise Malformed("a chat message without its id or its author's channel id")
    if author_id == ctx.bot_channel_id:
        return None  # our own message, echoed back by the next page
    name = (_text(details.get("displayName")) or "")[:256]
    event = stream_event(kind, snippet, message_id, author_id, name)
    mentioned = mentions(text, ctx.bot_names)
    if event is None and not mentioned and ctx.unaddressed == "ignore":
        return None
    return ChatMessage(
        platform=PLATFORM,
        id=message_id,
        conversation=ctx.conversation,
        author=Author(id=author_id, display_name=name, roles=_roles(details)),
        text=text,
        mentions_bot=mentioned,
        sent_at=_published_at(snippet),
        ambient=not mentioned and ctx.unaddressed == "ambient",
        stream_event=event,
    )


_EVENT_KINDS = frozenset(
    {
        "superChatEvent",
        "superStickerEvent",
        "newSponsorEvent",
        "memberMilestoneChatEvent",
        "membershipGiftingEvent",
        "giftMembershipReceivedEvent",
    }
)


def stream_event(
    kind: object, snippet: Mapping[str, Any], message_id: str, author_id: str, name: str
) -> StreamEvent | None:
    """The ``StreamEvent`` of a paid or membership item (see the module docstring); None for
    other types. ``author_id``/``name`` are the item's author: the buyer, the member, the
    gifter - or, for ``giftMembershipReceivedEvent``, the recipient."""
    who: dict[str, Any] = {"user_id": author_id, "user_name": name}
    if kind in ("superChatEvent", "superStickerEvent"):
        paid = _obj(
            snippet.get("superChatDetails" if kind == "superChatEvent" else "superStickerDetails")
        )
        return StreamEvent(
            kind=StreamEventKind.SUPER_CHAT
            if kind == "superChatEvent"
            else StreamEventKind.SUPER_STICKER,
            amount=(_text(paid.get("amountDisplayString")) or "")[:64] or None,
            amount_micros=_count(paid.get("amountMicros")),
            currency=(_text(paid.get("currency")) or "")[:16] or None,
            **who,
        )
    if kind == "newSponsorEvent":
        level = _text(_obj(snippet.get("newSponsorDetails")).get("memberLevelName"))
        return StreamEvent(kind=StreamEventKind.SUB, tier=level, **who)
    if kind == "memberMilestoneChatEvent":
        milestone = _obj(snippet.get("memberMilestoneChatDetails"))
        return StreamEvent(
            kind=StreamEventKind.RESUB,
            tier=_text(milestone.get("memberLevelName")),
            months=_count(milestone.get("memberMonth")),
            **who,
        )
    if kind == "membershipGiftingEvent":
        gifting = _obj(snippet.get("membershipGiftingDetails"))
        return StreamEvent(
            kind=StreamEventKind.GIFT_SUB,
            tier=_text(gifting.get("giftMembershipsLevelName")),
            count=_count(gifting.get("giftMembershipsCount")),
            gift_id=message_id,
            **who,
        )
    if kind == "giftMembershipReceivedEvent":
        received = _obj(snippet.get("giftMembershipReceivedDetails"))
        return StreamEvent(
            kind=StreamEventKind.GIFT_SUB,
            user_id=_text(received.get("gifterChannelId")),
            tier=_text(received.get("memberLevelName")),
            count=1,
            gift_id=_text(received.get("associatedMembershipGiftingMessageId")),
            recipient_id=author_id,
            recipient_name=name,
        )
    return None


def _count(value: object) -> int | None:
    """A non-negative integer, also as the decimal string the REST JSON uses for 64-bit ones."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and value.isdigit() and len(value) <= 20:
        return int(value)
    return None


def is_chat_end(item: Mapping[str, Any]) -> bool:
    """A ``chatEndedEvent``: the chat is over, stop polling it."""
    return _obj(item.get("snippet")).get("type") == "chatEndedEvent"


def _message_text(kind: object, snippet: Mapping[str, Any]) -> str | None:
    if kind == "textMessageEvent":
        details = _obj(snippet.get("textMessageDetails"))
        return _text(details.get("messageText")) or _text(snippet.get("displayMessage"))
    if kind == "superChatEvent":
        return _text(_obj(snippet.get("superChatDetails")).get("userComment"))
    if kind == "memberMilestoneChatEvent":
        return _text(_obj(snippet.get("memberMilestoneChatDetails")).get("userComment"))
    return None


def _roles(details: Mapping[str, Any]) -> frozenset[Role]:
    roles = set()  # ``is True``: a malformed flag ("x", 1) grants nothing
    if details.get("isChatOwner") is True:
        roles.add(Role.OWNER)
    if details.get("isChatModerator") is True:
        roles.add(Role.MODERATOR)
    if details.get("isChatSponsor") is True:
        roles.add(Role.SUBSCRIBER)  # a channel member ("sponsor" in the API)
    return frozenset(roles)


def _published_at(snippet: Mapping[str, Any]) -> datetime:
    parsed = parse_time(snippet.get("publishedAt"))
    if parsed is None:
        raise Malformed("publishedAt is missing or not an aware timestamp")
    return parsed


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp of the API (``...Z``) as an aware datetime; None if it is not one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


def _name_pattern(names: Iterable[str]) -> re.Pattern[str] | None:
    cleaned = sorted({n.strip().lstrip("@") for n in names if n.strip().lstrip("@")}, key=len)
    if not cleaned:
        return None
    alternatives = "|".join(re.escape(n) for n in reversed(cleaned))  # longest first
    # "@" at a word start, the name, then not a name character (so @Chorus != @Chorusbot).
    return re.compile(rf"(?<![\w@])@(?:{alternatives})(?![\w-])", re.IGNORECASE)


def mentions(text: str, names: Iterable[str]) -> bool:
    """Whether ``text`` mentions one of ``names`` as ``@Name`` (case-insensitive)."""
    pattern = _name_pattern(names)
    return bool(pattern and pattern.search(text))


# -- outbound -------------------------------------------------------------------------------------
_FENCE_LINE = re.compile(r"^\s*(```|~~~).*$", re.MULTILINE)
_LINK = re.compile(r"!?\[([^\]\n]+)\]\((\S+?)\)")
_EMPHASIS = re.compile(r"(\*\*|__|\*|`)(?=\S)(.+?)(?<=\S)\1")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+", re.MULTILINE)
_QUOTE = re.compile(r"^\s*>\s?", re.MULTILINE)
_SPACE = re.compile(r"\s+")
_MENTION_AT = re.compile(r"(?<![\w@])@(?=\w)")


def plain_text(markdown: str) -> str:
    """One line of plain text: live chat shows no markdown and no line breaks."""
    text = _FENCE_LINE.sub("", markdown)
    text = _LINK.sub(lambda m: m.group(1) if m.group(1) == m.group(2) else f"{m[1]} ({m[2]})", text)
    text = _EMPHASIS.sub(r"\2", text)
    text = _HEADING.sub("", text)
    text = _QUOTE.sub("", text)
    return _SPACE.sub(" ", text).strip()


def _defuse_mentions(text: str, allowed: Iterable[str]) -> str:
    pattern = _name_pattern(allowed)

    def fix(match: re.Match[str]) -> str:
        if pattern is not None and pattern.match(text, match.start()):
            return "@"
        return "@" + _WORD_JOINER

    return _MENTION_AT.sub(fix, text)


def reply_texts(
    reply: Reply,
    *,
    names: Mapping[str, str],
    limit: int = MESSAGE_LIMIT,
    max_pieces: int = 2,
) -> list[str]:
    """The messages to insert for ``reply``: at most ``max_pieces`` of at most ``limit`` chars.

    ``names`` maps channel ids to display names seen in the chat; the first addressed user with
    a known name is mentioned at the start (live chat has no replies, so that is how a viewer
    sees the answer is theirs). No one else can be mentioned.
    """
    addressed = [names[uid] for uid in reply.addressed_user_ids if names.get(uid)]
    text = _defuse_mentions(plain_text(reply.text), addressed)
    if not text:
        return []
    if addressed and not mentions(text, addressed[:1]):
        text = f"@{addressed[0].lstrip('@')} {text}"
    pieces = split_text(text, limit)
    if len(pieces) > max_pieces:
        pieces = pieces[:max_pieces]
        last = pieces[-1][: limit - len(_ELLIPSIS)].rstrip(" ,;:.-")
        pieces[-1] = last + _ELLIPSIS
    return pieces


def insert_body(live_chat_id: str, text: str) -> dict[str, Any]:
    """The ``liveChatMessages.insert`` request body (``part=snippet``) for one text message."""
    return {
        "snippet": {
            "liveChatId": live_chat_id,
            "type": "textMessageEvent",
            "textMessageDetails": {"messageText": text},
        }
    }
