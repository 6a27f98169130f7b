"""A streamed answer on Discord: post the first draft, edit it as the text grows, then turn it
into the final answer (``bot.platform.streaming.DraftView``).

Every call goes through ``DiscordSender.message_call`` under the channel's lock, so drafts,
finals and ordinary replies of one channel share its window (5 calls per 5 s) and never
interleave; ``pace`` lets a draft through only while a call is left for the final answer.

A draft is split like the final answer (``convert.draft_contents``): past 2,000 characters the
first message is edited to its final cut and the next message is posted, each with the nonce
its piece of the final answer will carry. The final answer is ``convert.reply_to_outgoing``,
exactly what an unstreamed reply sends: each message is edited to its piece (unchanged ones are
left alone), missing pieces are posted, and messages a longer draft needed are deleted. An edit
of a message someone deleted meanwhile posts the piece anew.

A gateway that crashed mid-stream gets the answer's message ids back from ``LiveAnswers``
(``state``/``resume``, saved in Redis) and edits them to the final text; a message deleted
meanwhile is posted anew. Without that record (Redis away) the nonces still hold for a few
minutes: the next gateway posts the final answer's pieces with the same nonces, Discord hands
back the draft messages it already has for them (``enforce_nonce``), and ``adopt`` edits them to
the final text: still one answer.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping
from typing import Any

import discord

from adapters.discord import convert
from adapters.discord.sender import DiscordSender
from bot.events import Reply, ReplyDraft

log = logging.getLogger("chorus.discord.live")
ADOPT_AFTER = 5.0  # seconds: a message older than this that a create returned was there before


class DiscordLive:
    """One answer's messages in one channel."""

    def __init__(
        self,
        client: discord.Client,
        sender: DiscordSender,
        draft: ReplyDraft,
        *,
        on_shown: Callable[[], None] = lambda: None,
    ) -> None:
        self.client = client
        self.sender = sender
        self.channel_id = convert.send_target(draft.conversation)
        self.key = f"channel:{self.channel_id}"
        self.reply_to = convert.snowflake(draft.reply_to_id)
        users = (convert.snowflake(uid) for uid in draft.addressed_user_ids)
        self.users = tuple(dict.fromkeys(uid for uid in users if uid is not None))
        self.messages: list[int] = []
        self.contents: list[str] = []
        self._on_shown = on_shown

    async def pace(self) -> None:
        await self.sender.pace(self.key)

    def state(self) -> dict[str, Any] | None:
        return {"messages": list(self.messages)} if self.messages else None

    def resume(self, state: Mapping[str, Any]) -> None:
        self.messages = [int(m) for m in state.get("messages") or ()]
        self.contents = [""] * len(self.messages)  # unknown: every piece is edited

    async def discard(self) -> None:
        async with self.sender.lock(self.key):
            for message_id in self.messages:
                await self._delete(message_id)
        self.messages.clear()
        self.contents.clear()

    async def show(self, draft: ReplyDraft) -> None:
        contents = convert.draft_contents(draft)
        if not contents:
            return
        async with self.sender.lock(self.key):
            for index, content in enumerate(contents):
                await self._put(index, content, self.users)
        self._on_shown()

    async def finish(self, reply: Reply) -> None:
        pieces = convert.reply_to_outgoing(reply)
        async with self.sender.lock(self.key):
            for index, piece in enumerate(pieces):
                await self._put(index, piece.content, piece.mention_user_ids)
            for message_id in self.messages[len(pieces) :]:
                await self._delete(message_id)
        del self.messages[len(pieces) :]

    async def _put(self, index: int, content: str, users: tuple[int, ...]) -> None:
        """Message ``index`` shows ``content``: edited, or posted when there is none yet."""
        if index < len(self.messages):
            if self.contents[index] == content:
                return
            try:
                await self._edit(self.messages[index], content, users)
            except discord.NotFound:  # deleted meanwhile: post it again
                self.messages[index] = await self._post(index, content, users)
            self.contents[index] = content
            return
        self.messages.append(await self._post(index, content, users))
        self.contents.append(content)

    async def _post(self, index: int, content: str, users: tuple[int, ...]) -> int:
        piece = convert.Outgoing(
            channel_id=self.channel_id,
            content=content,
            reply_to=self.reply_to if index == 0 else None,
            mention_user_ids=users,
            nonce=convert.piece_nonce(self.reply_to, index),
        )
        message = await self.sender.message_call(
            self.key, lambda: post(self.client, piece), what="send"
        )
        if message.content != content and _earlier(message):  # the nonce matched an earlier
            await self._edit(message.id, content, users)  # post (a crashed gateway's): ours now
        return message.id

    async def _edit(self, message_id: int, content: str, users: tuple[int, ...]) -> None:
        partial = self.client.get_partial_messageable(self.channel_id)
        message = partial.get_partial_message(message_id)
        await self.sender.message_call(
            self.key,
            lambda: message.edit(content=content, allowed_mentions=convert.allowed_mentions(users)),
            what="edit",
        )

    async def _delete(self, message_id: int) -> None:
        message = self.client.get_partial_messageable(self.channel_id)
        partial = message.get_partial_message(message_id)
        with contextlib.suppress(discord.NotFound):  # gone already
            await self.sender.message_call(self.key, partial.delete, what="delete")


def _earlier(message: discord.Message) -> bool:
    """Whether Discord answered a create with a message that existed before it (its nonce was
    used already: an edited draft, or one created well before now)."""
    age = discord.utils.utcnow() - message.created_at
    return message.edited_at is not None or age.total_seconds() > ADOPT_AFTER


async def post(client: discord.Client, piece: convert.Outgoing) -> discord.Message:
    """``POST /channels/{id}/messages`` for one piece (a reply reference on the first)."""
    channel = client.get_partial_messageable(piece.channel_id)
    reference = (
        discord.MessageReference(
            message_id=piece.reply_to, channel_id=piece.channel_id, fail_if_not_exists=False
        )
        if piece.reply_to is not None
        else None
    )
    extra: dict[str, Any] = {} if piece.nonce is None else {"nonce": piece.nonce}
    return await channel.send(
        content=piece.content,
        reference=reference,  # type: ignore[arg-type]
        allowed_mentions=convert.allowed_mentions(piece.mention_user_ids),
        **extra,
    )


async def adopt(
    client: discord.Client, sender: DiscordSender, key: str, piece: convert.Outgoing
) -> None:
    """Post one piece of an unstreamed reply; if Discord handed back an earlier message with
    the same nonce (a draft of this answer shown by a gateway that crashed), edit it to the
    piece, so the answer is still one message with the final text."""
    message = await sender.message_call(key, lambda: post(client, piece), what="send")
    if message.content == piece.content or not _earlier(message):
        return
    partial = client.get_partial_messageable(piece.channel_id).get_partial_message(message.id)
    await sender.message_call(
        key,
        lambda: partial.edit(
            content=piece.content,
            allowed_mentions=convert.allowed_mentions(piece.mention_user_ids),
        ),
        what="edit",
    )
