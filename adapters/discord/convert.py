"""Pure conversions between discord.py's parsed gateway models and Chorus's core events.

Nothing here does I/O: discord.py has already turned the wire payload into ``discord.Message``,
``RawMessageDeleteEvent`` or ``discord.Interaction`` objects (reading only what the gateway
sent and the cache it keeps), and these functions decide what Chorus sees of them and how a
``Reply`` goes back out. That keeps every policy decision (who is answered, which channel is
ambient, what may ping whom) in one table-testable place.

discord.py does not check the types of what it copies from a payload (``content``, names, an
attachment's fields), so inbound reads each such value defensively: a text that is not a
string makes the message ``ValueError`` (the adapter logs one line and skips it), a name of
another type falls back to the id, and an attachment that cannot be read is left out alone.

Safety on the way out is belt and braces: ``allowed_mentions`` lets through only the users the
bot means to address, and the text itself neutralises ``@everyone``, ``@here`` and role
mentions with a zero-width space, so even a client that ignored ``allowed_mentions`` would not
ping anyone.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import discord

import prompts
from bot.events import (
    Attachment,
    AttachmentKind,
    Author,
    ChatMessage,
    ConversationKey,
    MessageDeleted,
    Reply,
    ReplyDraft,
    Role,
)
from bot.platform.textsplit import split_text

PLATFORM = "discord"
MESSAGE_LIMIT = 2000  # characters per message, Discord's documented limit for bots
ZWSP = "\u200b"

_ANSWERABLE_TYPES = (discord.MessageType.default, discord.MessageType.reply)
_USER_MENTION = re.compile(r"<@!?(\d+)>")
_MASS_MENTION = re.compile(r"@(everyone|here)")
_ROLE_MENTION = re.compile(r"<@&(\d+)>")
_SNOWFLAKE = re.compile(r"^\d{1,20}$")


@dataclass(frozen=True, slots=True)
class Policy:
    """Who and where the bot answers; built from the settings once the bot's id is known."""

    bot_id: int
    answer_bots: bool = False
    allowed_channels: frozenset[int] = frozenset()  # empty: every channel
    always_answer_channels: frozenset[int] = frozenset()
    ambient_channels: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to create: ``POST /channels/{channel_id}/messages``."""

    channel_id: int
    content: str
    reply_to: int | None = None  # becomes message_reference on the first piece only
    mention_user_ids: tuple[int, ...] = ()
    nonce: str | None = None


# -- inbound -------------------------------------------------------------------------------------
def conversation_for(channel_id: int, parent_id: int | None = None) -> ConversationKey:
    """A thread (``parent_id`` set) is its own conversation inside its parent channel."""
    if parent_id is not None:
        return ConversationKey(platform=PLATFORM, channel=str(parent_id), thread=str(channel_id))
    return ConversationKey(platform=PLATFORM, channel=str(channel_id))


def conversation_of(channel: object, channel_id: int) -> ConversationKey:
    """The conversation of a discord.py channel object (a cached ``Thread`` knows its parent)."""
    if isinstance(channel, discord.Thread):
        return conversation_for(channel.id, channel.parent_id)
    return conversation_for(channel_id)


def send_target(conversation: ConversationKey) -> int:
    """The channel id to post into: the thread when there is one."""
    return int(conversation.thread or conversation.channel)


def message_to_chat(message: discord.Message, policy: Policy) -> ChatMessage | None:
    """The ChatMessage to publish, or None for what the bot must not see.

    Dropped: the bot's own messages (always), other bots and webhooks (unless ``answer_bots``),
    system messages (joins, pins, boosts...), channels outside the allowlist, unaddressed
    messages outside the always-answer and ambient channels, and messages with nothing to read
    (no text, no attachment) unless they ping the bot.

    Raises ``ValueError`` for a message discord.py parsed without what it needs (an author, a
    text, an id that is a snowflake).
    """
    author = getattr(message, "author", None)  # discord.py leaves it unset when it was absent
    if author is None:
        raise ValueError("a message without an author")
    if not isinstance(message.content, str):
        raise ValueError("a message whose content is not a string")
    if not 0 < message.id < 2**64:
        raise ValueError("a message id that is not a snowflake")
    if author.id == policy.bot_id:
        return None
    is_bot = bool(author.bot) or message.webhook_id is not None
    if is_bot and not policy.answer_bots:
        return None
    if message.type not in _ANSWERABLE_TYPES:
        return None
    is_direct = _is_direct(message.channel)
    conversation = conversation_of(message.channel, message.channel.id)
    places = _places(conversation)
    if not is_direct and policy.allowed_channels and not places & policy.allowed_channels:
        return None
    mentioned = getattr(message, "mentions", [])  # unset when the payload had none
    mentions_bot = any(user.id == policy.bot_id for user in mentioned)
    reply_to_id, reply_to_bot = _reference(message, policy.bot_id)
    addressed = is_direct or mentions_bot or reply_to_bot
    if addressed or places & policy.always_answer_channels:
        ambient = False
    elif places & policy.ambient_channels:
        ambient = True
    else:
        return None
    text = _readable_text(message.content, policy.bot_id, mentioned)
    if not text and not message.attachments and not mentions_bot:
        # Nothing to read. Without the Message Content intent Discord sends the text only of
        # DMs and of messages that ping the bot, so an unaddressed message or a reply to the
        # bot sent with its ping switched off arrives empty: answering it would be answering
        # blind. (A bare "@Chorus" is different: the ping is the message.)
        return None
    return ChatMessage(
        platform=PLATFORM,
        id=str(message.id),
        conversation=conversation,
        author=_author(author, message.guild, is_bot=is_bot),
        text=text,
        mentions_bot=mentions_bot,
        is_direct=is_direct,
        reply_to_id=reply_to_id,
        reply_to_bot=reply_to_bot,
        attachments=tuple(a for a in map(_attachment, message.attachments) if a is not None),
        sent_at=message.created_at,
        ambient=ambient,
        server=_server(getattr(message, "guild", None), message.channel),
    )


def command_to_chat(interaction: discord.Interaction, command: str) -> ChatMessage:
    """A native ``/chorus <command>`` as the text command ``/<command>`` (id = interaction id)."""
    channel_id = interaction.channel_id or interaction.user.id
    return ChatMessage(
        platform=PLATFORM,
        id=str(interaction.id),
        conversation=conversation_of(interaction.channel, channel_id),
        author=_author(interaction.user, interaction.guild, is_bot=interaction.user.bot),
        text=f"/{command}",
        mentions_bot=True,
        is_direct=interaction.guild_id is None,
        private_reply=True,  # answered ephemerally
        sent_at=interaction.created_at,
        server=_server(None, interaction),
    )


def deletions(
    channel_id: int, parent_id: int | None, message_ids: Iterable[int]
) -> list[MessageDeleted]:
    """One ``MessageDeleted`` per removed message (bulk deletes carry many ids)."""
    conversation = conversation_for(channel_id, parent_id)
    return [
        MessageDeleted(conversation=conversation, message_id=str(mid))
        for mid in sorted(message_ids)
    ]


def _server(guild: object, holder: object) -> str | None:
    """The guild id (for chorus.toml's scopes): the cached guild's, else the ``guild_id`` an
    uncached channel or an interaction carries; None in DMs."""
    guild_id = getattr(guild, "id", None) or getattr(holder, "guild_id", None)
    return str(guild_id) if isinstance(guild_id, int) else None


def _is_direct(channel: object) -> bool:
    """A DM. Decided by the channel, not ``message.guild``: that is None for uncached guilds."""
    if isinstance(channel, discord.DMChannel | discord.GroupChannel):
        return True
    return isinstance(channel, discord.PartialMessageable) and channel.guild_id is None


def _places(conversation: ConversationKey) -> set[int]:
    """Channel ids a channel list may name for this conversation: the channel and its thread."""
    ids = {int(conversation.channel)}
    if conversation.thread is not None:
        ids.add(int(conversation.thread))
    return ids


def _reference(message: discord.Message, bot_id: int) -> tuple[str | None, bool]:
    ref = message.reference
    if ref is None or ref.message_id is None or ref.type is discord.MessageReferenceType.forward:
        return None, False
    target = ref.resolved if isinstance(ref.resolved, discord.Message) else ref.cached_message
    target_author = getattr(target, "author", None)
    return str(ref.message_id), target_author is not None and target_author.id == bot_id


def _author(
    user: discord.User | discord.Member, guild: discord.Guild | None, *, is_bot: bool
) -> Author:
    roles: set[Role] = set()
    if guild is not None:
        roles.add(Role.MEMBER)
        if guild.owner_id == user.id:
            roles.add(Role.OWNER)
        if isinstance(user, discord.Member):
            perms = user.guild_permissions
            if perms.administrator or perms.manage_messages or perms.moderate_members:
                roles.add(Role.MODERATOR)
    name = user.display_name
    return Author(
        id=str(user.id),
        display_name=(name if isinstance(name, str) else str(user.id))[:256],
        roles=frozenset(roles),
        is_bot=is_bot,
    )


def _readable_text(content: str, bot_id: int, mentions: Iterable[discord.abc.User]) -> str:
    """The bot's leading mention removed; other ``<@id>`` shown as ``@name`` for the model."""
    text = re.sub(rf"^\s*<@!?{bot_id}>[\s,:]*", "", content)
    names = {user.id: user.display_name for user in mentions if isinstance(user.display_name, str)}

    def name(match: re.Match[str]) -> str:
        found = names.get(int(match.group(1)))
        return f"@{found}" if found is not None else match.group(0)

    return _USER_MENTION.sub(name, text).strip()


def _attachment(attachment: discord.Attachment) -> Attachment | None:
    """The attachment, or None when its url or size is unusable (the message keeps the rest)."""
    url, size = attachment.url, attachment.size
    if not isinstance(url, str) or not isinstance(size, int) or isinstance(size, bool) or size < 0:
        return None
    mime = attachment.content_type if isinstance(attachment.content_type, str) else None
    filename = attachment.filename if isinstance(attachment.filename, str) else None
    kind = AttachmentKind.IMAGE if mime and mime.startswith("image/") else AttachmentKind.FILE
    return Attachment(kind=kind, url=url, mime=mime, filename=filename, size=size)


# -- outbound ------------------------------------------------------------------------------------
def neutralise(text: str) -> str:
    """Make ``@everyone``, ``@here`` and ``<@&role>`` plain text (a zero-width space inside)."""
    text = _MASS_MENTION.sub(rf"@{ZWSP}\1", text)
    return _ROLE_MENTION.sub(rf"<@&{ZWSP}\1>", text)


def reply_to_outgoing(reply: Reply, limit: int = MESSAGE_LIMIT) -> list[Outgoing]:
    """The messages that deliver ``reply``: neutralised, split, only the first one a reply.

    Each piece of an answer to a message gets a deterministic ``nonce``; discord.py sends it
    with ``enforce_nonce``, so Discord creates a redelivered Reply (the bus is at-least-once)
    only once within its dedupe window instead of posting it twice.
    """
    channel_id = send_target(reply.conversation)
    reply_to = snowflake(reply.reply_to_id)
    users = tuple(
        dict.fromkeys(uid for uid in map(snowflake, reply.addressed_user_ids) if uid is not None)
    )
    pieces = split_text(neutralise(reply.text), limit)
    return [
        Outgoing(
            channel_id=channel_id,
            content=piece,
            reply_to=reply_to if index == 0 else None,
            mention_user_ids=users,
            nonce=piece_nonce(reply_to, index),
        )
        for index, piece in enumerate(pieces)
    ]


def draft_contents(draft: ReplyDraft, limit: int = MESSAGE_LIMIT) -> list[str]:
    """The messages that show a draft: its text so far, neutralised and split like the final
    answer, and what runs meanwhile as a small grey line under it (the "..." of progress)."""
    text = neutralise(draft.text).strip()
    if draft.status:
        status = prompts.render("discord/status", activity=draft.status)
        text = f"{text}\n{status}" if text else status
    return split_text(text, limit)


def piece_nonce(reply_to: int | None, index: int) -> str | None:
    """The nonce of piece ``index`` of the answer to ``reply_to`` (drafts and final share it)."""
    return f"r{reply_to}.{index}"[:25] if reply_to is not None else None


def followup_pieces(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """An interaction answer: neutralised and split like any message."""
    return split_text(neutralise(text), limit)


def allowed_mentions(user_ids: Iterable[int] = ()) -> discord.AllowedMentions:
    """Nobody but ``user_ids`` (and the author replied to) may be pinged."""
    return discord.AllowedMentions(
        everyone=False,
        roles=False,
        users=[discord.Object(id=uid) for uid in user_ids],
        replied_user=True,
    )


def snowflake(value: str | None) -> int | None:
    return int(value) if value is not None and _SNOWFLAKE.match(value) else None
