"""Discord's joins, leaves and reactions as ``ChatMessage``s carrying a ``ChannelEvent``.

They ride the inbound topic like a line (its order, its erasure by ``/forget``: the author is
who did it) with no text, and the router hands them to the plugins' ``on_member_join``,
``on_member_leave`` and ``on_reaction`` handlers without answering. A join or leave happens in
a server, not a channel: its conversation is the server's system channel (where Discord itself
announces joins), or the server's id when it has none. Joins and leaves reach the bot only with
the privileged members intent (``DISCORD_MEMBERS_INTENT``); reactions come with the default
intents. The bot's own reactions are not reported.
"""

from __future__ import annotations

import uuid

import discord

from adapters.discord.convert import PLATFORM, conversation_of
from bot.events import Author, ChannelEvent, ChannelEventKind, ChatMessage, ConversationKey


def reaction_to_chat(
    payload: discord.RawReactionActionEvent, channel: object, *, added: bool
) -> ChatMessage:
    member = payload.member
    name = member.display_name if member is not None else str(payload.user_id)
    kind = ChannelEventKind.REACTION_ADD if added else ChannelEventKind.REACTION_REMOVE
    return ChatMessage(
        platform=PLATFORM,
        id=f"reaction-{uuid.uuid4().hex}",
        conversation=conversation_of(channel, payload.channel_id),
        author=Author(id=str(payload.user_id), display_name=name[:256]),
        text="",
        server=str(payload.guild_id) if payload.guild_id is not None else None,
        channel_event=ChannelEvent(
            kind=kind, message_id=str(payload.message_id), emoji=str(payload.emoji)[:256]
        ),
    )


def member_to_chat(member: discord.Member, *, joined: bool) -> ChatMessage:
    guild = member.guild
    where = guild.system_channel.id if guild.system_channel is not None else guild.id
    kind = ChannelEventKind.MEMBER_JOIN if joined else ChannelEventKind.MEMBER_LEAVE
    return ChatMessage(
        platform=PLATFORM,
        id=f"member-{uuid.uuid4().hex}",
        conversation=ConversationKey(platform=PLATFORM, channel=str(where)),
        author=Author(id=str(member.id), display_name=member.display_name[:256]),
        text="",
        server=str(guild.id),
        channel_event=ChannelEvent(kind=kind),
    )
