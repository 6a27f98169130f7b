"""Slack wire payloads <-> Chorus events. Pure functions: no I/O, no clock, no state.

Inbound, one Events API ``event`` becomes a ``ChatMessage`` (or None when the bot must not see
it) and a ``message_deleted`` becomes ``MessageDeleted`` events. Outbound, a ``Reply`` becomes
the ``chat.postMessage`` arguments of each piece. Whatever needs state (thread participation,
user profiles, downloaded files) is looked up by the adapter and passed in.

Conversations: a mention in a channel is answered in its thread (``thread_ts`` = the message's
``thread_ts`` or ``ts``), so every channel thread is its own conversation. Direct messages are
answered where they were written: top-level DMs share the DM's conversation, a DM thread is its
own. Ambient channels (the router decides whether to speak) keep top-level chatter in one
channel-level conversation so the bot follows the room, and answer there.

Message ids are ``<channel>:<ts>``: a Slack ``ts`` is unique only within its channel, and the
router de-duplicates by platform + message id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypedDict

from adapters.slack.mrkdwn import to_mrkdwn
from bot.events import (
    Attachment,
    AttachmentKind,
    Author,
    ChatMessage,
    ConversationKey,
    MessageDeleted,
    Reply,
    Role,
)
from bot.platform.textsplit import split_text

PLATFORM = "slack"
MESSAGE_LIMIT = 3900  # Slack truncates long text and advises < 4,000 characters per message
COMMAND_NAMES = ("help", "pins", "forget", "reset", "link", "unlink")

# Message subtypes that are a person speaking; everything else (edits, joins, bot_message,
# channel_topic, ...) is not something to answer.
_SPOKEN_SUBTYPES = frozenset({None, "file_share", "thread_broadcast"})
_IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})

_USER_REF = re.compile(r"<@([UW][A-Z0-9]+)(?:\|([^>]*))?>")
_CHANNEL_REF = re.compile(r"<#([CGD][A-Z0-9]+)(?:\|([^>]*))?>")
_SPECIAL_REF = re.compile(r"<!([a-z]+)(?:\^[^|>]*)?(?:\|([^>]*))?>")
_SUBTEAM_REF = re.compile(r"<!subteam\^([A-Z0-9]+)(?:\|([^>]*))?>")
_LINK_REF = re.compile(r"<((?:https?|mailto):[^|>]+)(?:\|([^>]*))?>")


@dataclass(frozen=True)
class BotIdentity:
    """Who the bot is in this workspace, from ``auth.test``; in many workspaces also which
    installation answered (its store name: the team id, or ``org-{enterprise id}`` for an
    org-wide one), whose token the replies use."""

    user_id: str
    bot_id: str | None = None
    team_id: str | None = None
    install: str | None = None


@dataclass(frozen=True)
class ChannelPolicy:
    """Where the bot listens without being addressed."""

    ambient: frozenset[str] = frozenset()
    always_answer: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PostArgs:
    """The ``chat.postMessage`` arguments of one piece of a reply."""

    channel: str
    text: str
    thread_ts: str | None

    def as_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "channel": self.channel,
            "text": self.text,
            "mrkdwn": True,
            "link_names": False,  # never turn a bare @name into a ping
            "unfurl_links": False,
            "unfurl_media": False,
        }
        if self.thread_ts:
            kwargs["thread_ts"] = self.thread_ts
        return kwargs


# -- inbound ------------------------------------------------------------------------------------
def message_id(channel: str, ts: str) -> str:
    return f"{channel}:{ts}"


def is_from_bot(event: Mapping[str, Any], bot: BotIdentity) -> bool:
    """Any bot's message (bolt drops only our own; other bots could loop with us)."""
    return bool(
        event.get("bot_id")
        or event.get("subtype") == "bot_message"
        or event.get("user") == bot.user_id
        or (event.get("bot_profile") is not None)
    )


def _id(value: object) -> str | None:
    """An id or ``ts`` as Slack sends it (a non-empty string); anything else counts as absent."""
    return value if isinstance(value, str) and value else None


def thread_root(event: Mapping[str, Any]) -> str | None:
    """The ``ts`` of the thread the event belongs to, None for a top-level message."""
    thread_ts = _id(event.get("thread_ts"))
    return thread_ts if thread_ts and thread_ts != event.get("ts") else None


def message_from_event(
    event: Mapping[str, Any],
    *,
    bot: BotIdentity,
    channels: ChannelPolicy,
    in_bot_thread: bool = False,
    author: Author | None = None,
) -> ChatMessage | None:
    """The ``ChatMessage`` for an ``app_mention`` or ``message`` event, None to ignore it.

    ``in_bot_thread``: the bot answered or was mentioned in the event's thread (adapter state).
    ``author``: the profile the adapter looked up; by default just the user id.
    """
    kind, subtype = event.get("type"), event.get("subtype")
    if kind not in ("app_mention", "message") or not isinstance(subtype, str | None):
        return None
    if subtype not in _SPOKEN_SUBTYPES:
        return None
    if event.get("hidden") or is_from_bot(event, bot):
        return None
    user, channel, ts = _id(event.get("user")), _id(event.get("channel")), _id(event.get("ts"))
    if not (user and channel and ts):
        return None
    raw_text = str(event.get("text") or "")
    root = thread_root(event)
    is_direct = event.get("channel_type") == "im"
    mentioned = kind == "app_mention" or f"<@{bot.user_id}>" in raw_text
    if kind == "message" and mentioned and not is_direct:
        return None  # the app_mention event for the same message is the one we answer
    reply_to_bot = root is not None and (
        in_bot_thread or event.get("parent_user_id") == bot.user_id
    )
    ambient = False
    if is_direct:
        thread = root
    elif mentioned or reply_to_bot or channel in channels.always_answer:
        thread = root or ts
    elif channel in channels.ambient:
        thread, ambient = root, True
    else:
        return None
    return ChatMessage(
        platform=PLATFORM,
        id=message_id(channel, ts),
        conversation=ConversationKey(platform=PLATFORM, channel=channel, thread=thread),
        author=author or Author(id=user),
        text=plain_text(raw_text, bot_user_id=bot.user_id),
        mentions_bot=mentioned,
        is_direct=is_direct,
        reply_to_id=message_id(channel, root) if root else None,
        reply_to_bot=reply_to_bot,
        attachments=attachments_from_files(event.get("files") or ()),
        ambient=ambient,
        server=_id(event.get("team")) or bot.team_id,  # chorus.toml's scopes: slack:TEAM/...
        **_sent_at(ts),
    )


def deletions_from_event(
    event: Mapping[str, Any], *, channels: ChannelPolicy
) -> tuple[MessageDeleted, ...]:
    """``message_deleted`` -> one ``MessageDeleted`` per conversation that may hold the text."""
    if event.get("type") != "message" or event.get("subtype") != "message_deleted":
        return ()
    channel, deleted_ts = _id(event.get("channel")), _id(event.get("deleted_ts"))
    if not (channel and deleted_ts):
        return ()
    previous = event.get("previous_message")
    previous = previous if isinstance(previous, Mapping) else {}
    root = thread_root({"thread_ts": previous.get("thread_ts"), "ts": deleted_ts})
    if event.get("channel_type") == "im":
        threads: list[str | None] = [root]
    elif root:
        threads = [root]
    else:
        # A top-level channel message is its own thread's root, and in an ambient channel it was
        # also part of the channel-level conversation.
        threads = [deleted_ts, None] if channel in channels.ambient else [deleted_ts]
    return tuple(
        MessageDeleted(
            conversation=ConversationKey(platform=PLATFORM, channel=channel, thread=thread),
            message_id=message_id(channel, deleted_ts),
            author_id=_id(previous.get("user")),
        )
        for thread in threads
    )


def command_message(payload: Mapping[str, Any], *, author: Author | None = None) -> ChatMessage:
    """``/chorus pins`` -> a ChatMessage with text ``/pins`` (the router's text command).

    The id is the command's ``trigger_id`` (unique per invocation), which the adapter maps back
    to the ``response_url`` the answer goes to. Anything but a known sub-command asks for help.
    """
    name, _, args = str(payload.get("text") or "").strip().partition(" ")
    name = name.lower().lstrip("/")
    text = f"/{name} {args.strip()}".strip() if name in COMMAND_NAMES else "/help"
    channel = str(payload["channel_id"])
    user = str(payload["user_id"])
    return ChatMessage(
        platform=PLATFORM,
        id=str(payload.get("trigger_id") or f"{channel}:{user}:{text}"),
        conversation=ConversationKey(platform=PLATFORM, channel=channel),
        author=author or Author(id=user, display_name=str(payload.get("user_name") or "")),
        text=text,
        mentions_bot=True,
        is_direct=channel.startswith("D"),
        private_reply=True,  # answered through response_url, ephemerally
    )


def author_from_user(user_id: str, info: Mapping[str, Any]) -> Author:
    """A ``users.info`` user -> ``Author``: workspace owners and admins get their roles."""
    profile = info.get("profile") or {}
    name = (
        profile.get("display_name")
        or profile.get("real_name")
        or info.get("real_name")
        or info.get("name")
        or ""
    )
    roles = {Role.MEMBER}
    if info.get("is_owner") or info.get("is_primary_owner"):
        roles.add(Role.OWNER)
    if info.get("is_admin"):
        roles.add(Role.MODERATOR)
    return Author(
        id=user_id,
        display_name=str(name)[:256],
        roles=frozenset(roles),
        is_bot=bool(info.get("is_bot")),
    )


def attachments_from_files(files: Iterable[Mapping[str, Any]]) -> tuple[Attachment, ...]:
    """Slack ``files`` -> attachments without data (the adapter downloads the images)."""
    out = []
    for item in files:
        mime = str(item.get("mimetype") or "") or None
        url = item.get("url_private_download") or item.get("url_private")
        kind = AttachmentKind.IMAGE if mime in _IMAGE_MIMES else _kind_of(mime)
        size = item.get("size")
        out.append(
            Attachment(
                kind=kind,
                url=str(url) if url else None,
                mime=mime,
                filename=str(item.get("name") or "") or None,
                size=size if isinstance(size, int) and size >= 0 else None,
            )
        )
    return tuple(out)


def _kind_of(mime: str | None) -> AttachmentKind:
    if mime and mime.startswith("audio/"):
        return AttachmentKind.AUDIO
    if mime and mime.startswith("video/"):
        return AttachmentKind.VIDEO
    return AttachmentKind.FILE


def plain_text(text: str, *, bot_user_id: str | None = None) -> str:
    """Slack's wire text -> what a person reads: mentions, channels and links unwrapped.

    The bot's own mention is removed (it is how the user addressed the bot, not content).
    """
    if bot_user_id:
        text = re.sub(rf"<@{re.escape(bot_user_id)}(?:\|[^>]*)?>\s*", "", text)
    text = _USER_REF.sub(lambda m: f"@{m.group(2) or m.group(1)}", text)
    text = _CHANNEL_REF.sub(lambda m: f"#{m.group(2) or m.group(1)}", text)
    text = _SUBTEAM_REF.sub(lambda m: m.group(2) or f"@{m.group(1)}", text)
    text = _SPECIAL_REF.sub(lambda m: m.group(2) or f"@{m.group(1)}", text)
    text = _LINK_REF.sub(
        lambda m: f"{m.group(2)} ({m.group(1)})" if m.group(2) else m.group(1), text
    )
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text.strip()


def ts_to_datetime(ts: str) -> datetime | None:
    """A Slack ``ts`` (``"1515449522.000016"``, seconds since the epoch) as aware UTC."""
    try:
        return datetime.fromtimestamp(float(ts), UTC)
    except (ValueError, OverflowError, OSError):
        return None


class _SentAt(TypedDict, total=False):
    sent_at: datetime


def _sent_at(ts: str) -> _SentAt:
    when = ts_to_datetime(ts)
    return {"sent_at": when} if when is not None else {}


# -- outbound -----------------------------------------------------------------------------------
def reply_to_posts(reply: Reply, *, limit: int = MESSAGE_LIMIT) -> list[PostArgs]:
    """The ``chat.postMessage`` calls for one reply: mrkdwn, mention-safe, split to ``limit``.

    The thread is the conversation's (a channel thread, a DM thread, or None for top-level).
    """
    text = to_mrkdwn(reply.text, reply.addressed_user_ids)
    return [
        PostArgs(
            channel=reply.conversation.channel, text=piece, thread_ts=reply.conversation.thread
        )
        for piece in split_text(text, limit)
    ]


def command_response(reply: Reply, *, limit: int = MESSAGE_LIMIT) -> list[dict[str, Any]]:
    """The ``response_url`` bodies answering a slash command: ephemeral, visible only to its user."""
    text = to_mrkdwn(reply.text, reply.addressed_user_ids)
    return [
        {"response_type": "ephemeral", "text": piece, "replace_original": False}
        for piece in split_text(text, limit)
    ]
