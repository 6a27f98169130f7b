"""Twitch chat notices (``channel.chat.notification``) -> Chorus events. Pure: no I/O, no clock
but the event's.

Twitch shows subs, resubs, gifted subs, raids and announcements in chat as *notices*, delivered
by EventSub ``channel.chat.notification`` (v1, condition ``broadcaster_user_id`` + ``user_id``,
the same ``user:read:chat`` grant as the chat itself). Each becomes a ``ChatMessage`` carrying a
``StreamEvent`` (``bot.events``): the notice's ``message_id`` is the message id, the chatter its
author, and the text the viewer attached (a resub message, an announcement) its text - an
``@mention`` of the bot in it is a mention like any other.

| ``notice_type``                                | ``StreamEvent``                               |
|------------------------------------------------|-----------------------------------------------|
| ``sub``, ``prime_paid_upgrade``, ``gift_paid_upgrade`` | ``sub`` (``tier``)                    |
| ``resub``                                      | ``resub`` (``months`` = cumulative, ``tier``) |
| ``community_sub_gift``                         | ``gift_sub`` (``count`` = total, ``gift_id``) |
| ``sub_gift``                                   | ``gift_sub`` (one ``recipient_*``; ``gift_id`` = its ``community_gift_id``) |
| ``raid``                                       | ``raid`` (the raider; ``count`` = viewers)    |
| ``announcement``                               | ``announcement``                              |

A community gift of N subs is one ``community_sub_gift`` notice and then N ``sub_gift`` notices,
each with its own ``message_id`` (and its own EventSub message id, so the socket's de-duplication
keeps all of them) and ``community_gift_id`` = the community gift's ``id``: the burst is made one
thanks by the policy (``bot/engagement/thanks.py``), which counts by that id. An anonymous gifter has
no chatter ids (``chatter_is_anonymous``): the event's ``user_id`` is None.

Other notices (``pay_it_forward``, ``bits_badge_tier``, ``charity_donation``, ``watch_streak``,
``unraid``...) carry no stream event; one with a text the viewer wrote is published as plain
chat. ``shared_chat_*`` notices happened in another channel of a shared chat session and are
ignored, as the other channels' chat is.

twitchio 3.3 builds its ``ChatNotification`` by indexing every notice object, including ones
Twitch added later (``watch_streak``, ``modiversary``, ``shared_chat_modiversary``); a payload
without them (any sent before April 2026, and the recorded fixtures) would fail to parse and be
skipped. ``complete`` fills the absent ones with null, as Twitch sends them, before twitchio
parses the payload (``eventsub.HandoverWebsocket``).

A notice cannot be replied to (Twitch threads replies to chat messages only), so an answer to
one goes out unthreaded with an ``@mention`` instead (``Unrepliable``).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from typing import Any

from cachetools import FIFOCache
from twitchio import ChatNotification

from adapters.twitch.convert import PLATFORM, BotIdentity, Malformed, mentions, roles
from bot.events import (
    Author,
    ChatMessage,
    ConversationKey,
    Reply,
    StreamEvent,
    StreamEventKind,
    utcnow,
)

SUBSCRIPTION = "channel.chat.notification"
ANONYMOUS = "anonymous"  # the author id of an anonymous gifter's notice (Twitch ids are digits)
# Notice objects twitchio 3.3 indexes (``payload[name]``): null unless the notice is theirs.
NOTICE_OBJECTS = (
    "sub",
    "resub",
    "sub_gift",
    "community_sub_gift",
    "gift_paid_upgrade",
    "prime_paid_upgrade",
    "pay_it_forward",
    "raid",
    "announcement",
    "bits_badge_tier",
    "charity_donation",
    "watch_streak",
    "modiversary",
    "shared_chat_sub",
    "shared_chat_resub",
    "shared_chat_sub_gift",
    "shared_chat_community_sub_gift",
    "shared_chat_gift_paid_upgrade",
    "shared_chat_prime_paid_upgrade",
    "shared_chat_pay_it_forward",
    "shared_chat_raid",
    "shared_chat_announcement",
    "shared_chat_modiversary",
)
_NO_ID = frozenset({None, "", "None"})
_TIERS = {"1000": "1000", "2000": "2000", "3000": "3000"}


def complete(event: MutableMapping[str, Any]) -> None:
    """Add the notice objects a payload lacks, as null (see the module docstring)."""
    for name in NOTICE_OBJECTS:
        event.setdefault(name, None)


def chat_message(
    event: ChatNotification, *, bot: BotIdentity, ambient: bool = True
) -> ChatMessage | None:
    """The ``ChatMessage`` for one chat notice, or None when it carries nothing for Chorus.

    None for: the bot's own notices, notices from another channel of a shared chat, and a
    notice that is no stream event and has no text (or, with ``ambient`` off, no mention).
    ``Malformed`` when an id is missing or of another type.
    """
    chatter = event.chatter
    if chatter.id == bot.id:
        return None
    notice = event.notice_type
    if not isinstance(notice, str) or notice.startswith("shared_chat_"):
        return None
    channel = _text(event.broadcaster.id, "broadcaster_user_id")
    message_id = _text(event.id, "message_id")
    # twitchio turns an anonymous gifter's null id into "None" (``PartialUser`` does ``str(id)``)
    anonymous = event.anonymous is True or chatter.id in _NO_ID
    author_id = ANONYMOUS if anonymous else _text(chatter.id, "chatter_user_id")
    name = "" if anonymous else _name(chatter)
    stream_event = _stream_event(event, notice, None if anonymous else author_id, name)
    text = event.text if isinstance(event.text, str) else ""
    mentioned = mentions(event.fragments or (), text, bot)
    if stream_event is None and (not text.strip() or not (mentioned or ambient)):
        return None
    return ChatMessage(
        platform=PLATFORM,
        id=message_id,
        conversation=ConversationKey(platform=PLATFORM, channel=channel),
        author=Author(
            id=author_id,
            display_name=name or author_id,
            roles=roles(event.badges or (), is_broadcaster=author_id == channel),
        ),
        text=text,
        mentions_bot=mentioned,
        sent_at=event.timestamp or utcnow(),
        ambient=not mentioned and ambient,
        stream_event=stream_event,
        server=_login(event.broadcaster.name),  # chorus.toml's scopes: twitch:LOGIN
    )


def _stream_event(
    event: ChatNotification, notice: str, user_id: str | None, name: str
) -> StreamEvent | None:
    kind = StreamEventKind
    who: dict[str, Any] = {"user_id": user_id, "user_name": name}
    if notice == "sub" and event.sub is not None:
        tier = _tier(event.sub.tier, prime=event.sub.prime)
        return StreamEvent(kind=kind.SUB, tier=tier, **who)
    if notice == "prime_paid_upgrade" and event.prime_paid_upgrade is not None:
        return StreamEvent(kind=kind.SUB, tier=_tier(event.prime_paid_upgrade.tier), **who)
    if notice == "gift_paid_upgrade":
        return StreamEvent(kind=kind.SUB, **who)
    if notice == "resub" and event.resub is not None:
        resub = event.resub
        tier = _tier(resub.tier, prime=resub.prime)
        return StreamEvent(kind=kind.RESUB, tier=tier, months=resub.cumulative_months, **who)
    if notice == "community_sub_gift" and event.community_sub_gift is not None:
        burst = event.community_sub_gift
        gift_id = _text(burst.id, "community_sub_gift.id")
        tier = _tier(burst.tier)
        return StreamEvent(kind=kind.GIFT_SUB, count=burst.total, gift_id=gift_id, tier=tier, **who)
    if notice == "sub_gift" and event.sub_gift is not None:
        gift = event.sub_gift
        recipient = gift.recipient
        return StreamEvent(
            kind=kind.GIFT_SUB,
            count=1,
            gift_id=gift.community_gift_id or None,
            tier=_tier(gift.tier),
            recipient_id=_text(recipient.id, "sub_gift.recipient_user_id"),
            recipient_name=_name(recipient),
            **who,
        )
    if notice == "raid" and event.raid is not None:
        raider = event.raid.user
        raider_id = _text(raider.id, "raid.user_id")
        return StreamEvent(
            kind=kind.RAID,
            user_id=raider_id,
            user_name=_name(raider),
            count=event.raid.viewer_count,
        )
    if notice == "announcement":
        return StreamEvent(kind=kind.ANNOUNCEMENT, **who)
    return None


def _tier(value: object, *, prime: bool = False) -> str | None:
    """Twitch's plan (``1000``/``2000``/``3000``), or ``prime`` for a Prime sub."""
    if prime:
        return "prime"
    return _TIERS.get(value) if isinstance(value, str) else None


def _name(user: Any) -> str:
    names = [n for n in (user.display_name, user.name) if isinstance(n, str) and n]
    return names[0][:256] if names else ""


def _login(login: object) -> str | None:
    return login.lower()[:256] if isinstance(login, str) and login else None


def _text(value: object, field: str) -> str:
    if isinstance(value, str) and value:
        return value
    raise Malformed(f"{field} is missing or not a string")


class Unrepliable:
    """The ids of the notices published lately: Twitch refuses a reply threaded to a notice
    (Send Chat Message answers 400 "Message cannot be replied to"), so an answer to one - a
    resub message that mentioned the bot - goes out unthreaded, starting with ``@login``."""

    def __init__(self, capacity: int = 1000) -> None:
        self.capacity = capacity
        self._ids: FIFOCache[str, None] = FIFOCache(capacity)  # the first published goes first

    def add(self, message_id: str) -> None:
        if message_id not in self._ids:  # a repeat keeps its place
            self._ids[message_id] = None

    def unthread(self, reply: Reply, logins: Mapping[str, str]) -> Reply:
        """``reply`` as it can be sent: unchanged unless it answers a notice."""
        if reply.reply_to_id is None or reply.reply_to_id not in self._ids:
            return reply
        login = next((logins[u] for u in reply.addressed_user_ids if u in logins), None)
        text = f"@{login} {reply.text}" if login else reply.text
        return reply.model_copy(update={"reply_to_id": None, "text": text})
