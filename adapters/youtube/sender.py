"""The YouTube adapter's writing half: ``outbound:youtube`` replies -> ``liveChatMessages.insert``.

Kept apart from the reading half (adapter.py, chat_stream.py) because the two share only two
small things: the display names seen in the chat (a reply starts with ``@Name`` of the viewer it
answers; live chat has no threads) and the ids of the messages sent (the chat echoes them back,
and the reader must not take them for new ones). A failed send is logged and acked: a live chat
answer that comes minutes late is worse than none.

Every piece is paid from the units the reply's turn reserved (``Reply.budget_hold``, see
bot/quota/ledger.py); once the reply is out, or has failed, what the hold did not spend is
released for the next turn. A piece no hold covers is sent only within the reply budget: past
it the rest of the reply is dropped (logged), so replies never eat what reading the chat needs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from cachetools import FIFOCache

from adapters.youtube import convert
from adapters.youtube.api import ChatUnavailable, QuotaExceeded, ReplyBudgetSpent, YouTubeAPI
from adapters.youtube.chat_stream import SeenIds
from bot.bus.base import EventBus
from bot.bus.topics import outbound_topic
from bot.events import Reply

log = logging.getLogger("chorus.youtube")

_KNOWN_NAMES = 5000


class Sender:
    def __init__(
        self,
        bus: EventBus,
        api: YouTubeAPI,
        *,
        max_pieces: int,
        seen: SeenIds,
        quota_fields: Callable[[], dict[str, object]],
    ) -> None:
        self._bus = bus
        self._api = api
        self._max_pieces = max_pieces
        self._seen = seen
        self._quota_fields = quota_fields
        # channel id -> display name; a name seen again is the newest, a lookup changes nothing
        self._names: FIFOCache[str, str] = FIFOCache(_KNOWN_NAMES)

    def remember(self, channel_id: str, name: str) -> None:
        """A viewer's display name, for mentioning them in a reply (the latest 5,000)."""
        if name:
            self._names[channel_id] = name

    async def run(self) -> None:
        topic = outbound_topic(convert.PLATFORM)
        async for delivery in self._bus.consume(topic, Reply, group="outbound"):
            reply, sent = delivery.event, 0
            try:
                sent = await self.send(reply)
            except asyncio.CancelledError:
                raise
            except ReplyBudgetSpent:
                log.warning(
                    "youtube reply dropped: the reply budget is spent (the rest of the quota "
                    "is kept for reading the chat)",
                    extra={"reply_to_id": reply.reply_to_id, **self._quota_fields()},
                )
            except QuotaExceeded:
                log.error(
                    "youtube reply dropped: the quota is spent",
                    extra={"reply_to_id": reply.reply_to_id, **self._quota_fields()},
                )
            except ChatUnavailable as exc:
                log.warning(
                    "youtube reply dropped: the chat is unavailable",
                    extra={"reply_to_id": reply.reply_to_id, "reason": exc.reason},
                )
            except Exception:
                log.exception("youtube reply failed", extra={"reply_to_id": reply.reply_to_id})
            # (a cancelled send keeps its hold: it lapses by itself)
            await self._api.ledger.settle(reply.budget_hold, sent=sent > 0)
            await delivery.ack()

    async def send(self, reply: Reply) -> int:
        """Insert the reply's pieces; how many went out."""
        pieces = convert.reply_texts(reply, names=self._names, max_pieces=self._max_pieces)
        for n, text in enumerate(pieces):
            try:
                sent = await self._api.insert_message(
                    reply.conversation.channel, text, hold=reply.budget_hold
                )
            except ReplyBudgetSpent:
                if not n:
                    raise
                log.warning(
                    "youtube reply cut short: the reply budget pays for no more pieces",
                    extra={"reply_to_id": reply.reply_to_id, "pieces_sent": n},
                )
                return n
            if sent.get("id"):
                self._seen.add(str(sent["id"]))
        return len(pieces)
