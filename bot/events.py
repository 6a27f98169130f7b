"""The core event types every adapter produces and consumes.

These models cross process boundaries (the event bus may be Redis Streams), so each one is a
frozen pydantic model that round-trips through JSON unchanged. Identity is always the platform's
user *id*: display names can be changed by their owner to impersonate someone else.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    RootModel,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)


def _require_aware(value: datetime) -> datetime:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError("timestamps must be timezone-aware (UTC)")
    return value.astimezone(UTC)


AwareDatetime = Annotated[datetime, AfterValidator(_require_aware)]


def utcnow() -> datetime:
    """Now, as an aware UTC datetime (the only kind the models accept)."""
    return datetime.now(UTC)


class _Frozen(BaseModel):
    # Attachment bytes travel base64-encoded, so any event survives a JSON bus (Redis Streams).
    model_config = ConfigDict(
        frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64"
    )


class Role(StrEnum):
    """What a user is in the place they wrote from; used for permissions, never for identity."""

    OWNER = "owner"
    MODERATOR = "moderator"
    SUBSCRIBER = "subscriber"
    MEMBER = "member"


def escape_key_part(part: str) -> str:
    """Escape one part of a colon-separated key (the one rule for every Redis key)."""
    # ':' separates the parts of the string form; '%' escapes itself so the form is reversible.
    return part.replace("%", "%25").replace(":", "%3A")


def _unescape(part: str) -> str:
    return part.replace("%3A", ":").replace("%25", "%")


class ConversationKey(_Frozen):
    """Where a conversation lives: platform + channel + optional thread.

    A Discord thread or a Slack thread is its own conversation, so it has its own history.
    """

    platform: str = Field(min_length=1, max_length=32, pattern=r"^[a-z0-9_]+$")
    channel: str = Field(min_length=1, max_length=256)
    thread: str | None = Field(default=None, min_length=1, max_length=256)

    def __str__(self) -> str:
        parts = [self.platform, escape_key_part(self.channel)]
        if self.thread is not None:
            parts.append(escape_key_part(self.thread))
        return ":".join(parts)

    @classmethod
    def parse(cls, text: str) -> ConversationKey:
        """Inverse of ``str(key)``."""
        parts = text.split(":")
        if not 2 <= len(parts) <= 3:
            raise ValueError(f"not a conversation key: {text!r}")
        thread = _unescape(parts[2]) if len(parts) == 3 else None
        return cls(platform=parts[0], channel=_unescape(parts[1]), thread=thread)


class Author(_Frozen):
    """Who wrote a message. ``id`` is the platform's stable user id."""

    id: str = Field(min_length=1, max_length=256)
    display_name: str = Field(default="", max_length=256)
    roles: frozenset[Role] = frozenset()
    is_bot: bool = False

    @property
    def is_moderator(self) -> bool:
        return bool(self.roles & {Role.OWNER, Role.MODERATOR})


class AttachmentKind(StrEnum):
    IMAGE = "image"
    FILE = "file"
    AUDIO = "audio"
    VIDEO = "video"


class Attachment(_Frozen):
    """A file a user attached. ``data`` is filled only when the adapter downloaded it."""

    kind: AttachmentKind
    url: str | None = None
    mime: str | None = None
    filename: str | None = None
    size: int | None = Field(default=None, ge=0)
    data: bytes | None = None


class StreamEventKind(StrEnum):
    """What a viewer did on stream, in the same words on every platform.

    A YouTube membership is a ``sub``, a member milestone a ``resub`` and gifted memberships a
    ``gift_sub``, so one setting (``CHORUS_THANKS``) says what to thank wherever it happens.
    """

    RAID = "raid"  # Twitch: a broadcaster brought ``count`` viewers
    SUB = "sub"  # Twitch: a new (or upgraded) sub; YouTube: a new member
    RESUB = "resub"  # Twitch: a resub shared in chat; YouTube: a member milestone (``months``)
    GIFT_SUB = "gift_sub"  # Twitch: gifted subs; YouTube: gifted memberships (``count``)
    CHEER = "cheer"  # Twitch: ``bits`` cheered in a chat message
    SUPER_CHAT = "super_chat"  # YouTube: a paid message (``amount``)
    SUPER_STICKER = "super_sticker"  # YouTube: a paid sticker (``amount``)
    ANNOUNCEMENT = "announcement"  # Twitch: a moderator's or the broadcaster's announcement
    REDEMPTION = "redemption"  # Twitch: a channel-point reward (``reward``, ``cost``) redeemed


class ChannelEventKind(StrEnum):
    """Something a person did in a channel other than writing a line, as platforms report it."""

    MEMBER_JOIN = "member_join"  # Discord: joined the server (needs DISCORD_MEMBERS_INTENT)
    MEMBER_LEAVE = "member_leave"  # Discord: left the server (needs DISCORD_MEMBERS_INTENT)
    REACTION_ADD = "reaction_add"  # Discord: added a reaction to a message
    REACTION_REMOVE = "reaction_remove"  # Discord: took a reaction back
    # Twitch: the channel went live / its stream ended (TWITCH_STREAM_STATE);
    # YouTube: the bot began following a broadcast's chat / that chat is over
    STREAM_ONLINE = "stream_online"
    STREAM_OFFLINE = "stream_offline"


class ChannelEvent(_Frozen):
    """A join, a leave, a reaction or a stream going live or ending, carried by a
    ``ChatMessage`` with no text
    (``ChatMessage.channel_event``) so it rides the inbound topic with its order and its
    erasure; the message's author is who did it. Never answered: the router hands it to the
    plugins' handlers (``bot.plugins.events``) and acks it."""

    kind: ChannelEventKind
    message_id: str | None = Field(
        default=None, min_length=1, max_length=256, description="a reaction's message"
    )
    emoji: str | None = Field(default=None, max_length=256, description="a reaction's emoji")


class StreamEvent(_Frozen):
    """A stream event (a raid, a sub, gifts, bits, a Super Chat...), carried by the
    ``ChatMessage`` the platform showed for it (``ChatMessage.stream_event``).

    ``user_id``/``user_name`` are who did it and is thanked - the raider, the subscriber, the
    gifter - which is not always the message's author (YouTube names a gift's *recipient* as
    the author of its "received" item); ``user_id`` is None for an anonymous gifter. What the
    viewer wrote with it (a resub message, a Super Chat comment, the text around a cheer) is
    the message's ``text``: user data, never instructions.

    Gift bursts: Twitch announces a community gift (``count`` = how many) and then sends one
    notice per recipient, each with its own message id and the announcement's id; YouTube does
    the same with a gifting item and one "received" item per recipient. Both ends carry the
    same ``gift_id``; a recipient's part has ``recipient_id`` set, so the thanks policy counts
    a burst once, however many parts arrive and in whatever order.
    """

    kind: StreamEventKind
    user_id: str | None = Field(default=None, min_length=1, max_length=256)
    user_name: str = Field(default="", max_length=256)
    amount: str | None = Field(
        default=None, max_length=64, description='as the platform shows it: "$5.00", "¥200"'
    )
    amount_micros: int | None = Field(default=None, ge=0)
    currency: str | None = Field(default=None, max_length=16)
    bits: int | None = Field(default=None, ge=0)
    tier: str | None = Field(
        default=None,
        max_length=256,
        description='Twitch "1000"/"2000"/"3000" or "prime"; YouTube: the membership level name',
    )
    months: int | None = Field(default=None, ge=0, description="cumulative months (resub)")
    count: int | None = Field(default=None, ge=0, description="gifts in a burst, raid viewers")
    gift_id: str | None = Field(default=None, min_length=1, max_length=256)
    recipient_id: str | None = Field(default=None, min_length=1, max_length=256)
    recipient_name: str = Field(default="", max_length=256)
    reward: str = Field(default="", max_length=256, description="a redeemed reward's title")
    reward_id: str | None = Field(default=None, min_length=1, max_length=256)
    cost: int | None = Field(default=None, ge=0, description="a reward's price in channel points")

    @model_serializer(mode="wrap")
    def _without_absent_reward(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No reward keys on an event that is no redemption: it reads exactly as before they
        existed, so a process of the previous release still takes it during a rolling deploy."""
        data: dict[str, Any] = handler(self)
        if self.kind is not StreamEventKind.REDEMPTION:
            for name in ("reward", "reward_id", "cost"):
                data.pop(name, None)
        return data


class ChatMessage(_Frozen):
    """One inbound message, normalised from any platform.

    A stream event rides on the message that shows it (``stream_event``) rather than on a
    topic of its own, on purpose: it then shares everything the inbound topic guarantees - one
    partition per conversation, so events and chat are decided in the order they happened;
    the router's claims and done markers by message id, so a redelivered event is thanked
    once; dead letters; the live-chat policy's pause - and a text that comes with an event (a
    resub message, a Super Chat comment) is an ordinary line: one that mentions the bot is a
    mention and answered as one. A separate topic would need all of that built twice, and
    could reorder a Super Chat against the chat around it.
    """

    platform: str = Field(min_length=1, max_length=32, pattern=r"^[a-z0-9_]+$")
    id: str = Field(min_length=1, max_length=256, description="the platform's own message id")
    conversation: ConversationKey
    author: Author
    text: str
    mentions_bot: bool = False
    is_direct: bool = False
    private_reply: bool = Field(
        default=False,
        description="the answer reaches only the author (a native slash command answered "
        "ephemerally); a direct message is private anyway (is_direct)",
    )
    reply_to_id: str | None = None
    reply_to_bot: bool = False
    attachments: tuple[Attachment, ...] = ()
    sent_at: AwareDatetime = Field(default_factory=utcnow)
    ambient: bool = Field(
        default=False,
        description="not addressed to the bot, from a channel where the engagement policy "
        "decides whether to speak; everything else the adapter publishes is answered",
    )
    stream_event: StreamEvent | None = Field(
        default=None,
        description="the stream event this message shows (a raid, a sub, a Super Chat...); "
        "its text, if any, is what the viewer wrote with it",
    )
    channel_event: ChannelEvent | None = Field(
        default=None,
        description="a join, a leave or a reaction this message stands for (its text is "
        "empty): handed to the plugins, never answered",
    )
    server: str | None = Field(
        default=None,
        max_length=256,
        description="where the channel belongs, for chorus.toml's scopes: the Discord guild "
        "id, the Slack team id, the Twitch channel's login; None in DMs and elsewhere",
    )

    @property
    def addressed(self) -> bool:
        """True when the bot was spoken to directly: a DM, a mention or a reply to it."""
        return self.is_direct or self.mentions_bot or self.reply_to_bot

    @model_serializer(mode="wrap")
    def _without_absent_event(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """No ``stream_event`` key when there is none: a message then reads exactly as before
        the field existed, so a process of the previous release (``extra="forbid"``) still
        takes it from the bus during a rolling deploy."""
        data: dict[str, Any] = handler(self)
        if self.stream_event is None:
            data.pop("stream_event", None)
        return data


class Reply(_Frozen):
    """One outbound answer, before the platform's own formatting and splitting."""

    conversation: ConversationKey
    text: str
    reply_to_id: str | None = None
    addressed_user_ids: tuple[str, ...] = ()
    in_reply_to_platform: str | None = None
    is_error: bool = False
    # The quota units its turn reserved (bot/quota/ledger.py): the sender pays from them and
    # releases the rest. None where replies cost nothing.
    budget_hold: str | None = None


class ReplyDraft(_Frozen):
    """The answer to ``reply_to_id`` so far, while the model is still writing it (streaming).

    Published on ``outbound:<platform>`` before the final ``Reply`` (same partition, so in
    order), and only for platforms that can edit a message. ``text`` is the whole draft, not a
    delta: the latest draft wins, so a gateway may skip any of them, and a worker that took the
    turn over after a crash simply starts the draft again. ``status`` says what runs meanwhile
    (a tool: "fetching a page"), shown while ``text`` is empty or the model is busy. The final
    ``Reply`` with the same conversation and ``reply_to_id`` replaces whatever a draft showed.
    """

    conversation: ConversationKey
    reply_to_id: str = Field(min_length=1, max_length=256)
    text: str = ""
    status: str | None = None
    addressed_user_ids: tuple[str, ...] = ()
    seq: int = Field(ge=1, description="the draft's number within its turn, from 1")


class Outbound(RootModel[Reply | ReplyDraft]):
    """What ``outbound:<platform>`` carries: a final ``Reply`` or a ``ReplyDraft``. A consumer
    that only knows ``Reply`` drops a draft (it does not fit the model) and loses nothing."""

    model_config = ConfigDict(frozen=True)


class MessageDeleted(_Frozen):
    """A platform removed a message, or all of one user's messages in a conversation.

    Adapters publish it (Discord deletions, Slack ``message_deleted``, Twitch
    ``channel.chat.message_delete`` and ``clear_user_messages``, YouTube deletions and bans) so
    the removed text leaves the bot's stored context too.
    """

    conversation: ConversationKey
    message_id: str | None = None
    author_id: str | None = None


class DeadLetter(_Frozen):
    """An inbound message taken out of circulation: it was delivered ``attempts`` times (each
    worker that took it died or failed before answering) and is not retried again. Kept on the
    ``dead_letters`` topic for an operator to look at; nobody answers it."""

    message: ChatMessage
    attempts: int
    reason: str


class ModerationRequest(_Frozen):
    """A moderation action asked of a platform's gateway (``bot.platform.moderation``).

    Whoever decides (the ``moderation`` plugin, in a worker) publishes it on
    ``moderation:<platform>``; the gateway running that platform's adapter performs it through
    the adapter's ``ModerationActions`` and writes the outcome to the audit trail. ``action`` is
    one of ``delete`` (needs ``message_id``), ``timeout`` (``user_id``, ``seconds``),
    ``untimeout``, ``ban`` and ``unban`` (``user_id``); ``actor`` says who asked.
    """

    conversation: ConversationKey
    action: Literal["delete", "timeout", "untimeout", "ban", "unban"]
    message_id: str | None = Field(default=None, min_length=1, max_length=256)
    user_id: str | None = Field(default=None, min_length=1, max_length=256)
    seconds: int | None = Field(default=None, ge=1)
    reason: str = Field(default="", max_length=500)
    actor: str = Field(default="", max_length=256)

    @model_validator(mode="after")
    def _target(self) -> ModerationRequest:
        if self.action == "delete" and self.message_id is None:
            raise ValueError("a delete needs message_id")
        if self.action != "delete" and self.user_id is None:
            raise ValueError(f"a {self.action} needs user_id")
        if self.action == "timeout" and self.seconds is None:
            raise ValueError("a timeout needs seconds")
        return self
