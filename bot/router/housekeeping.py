"""What the router settles without an agent turn: platform deletions applied to the history,
and messages moved to the dead letters.

Why apart from ``core``: neither takes a claim, a model call or a conversation's turn order;
each is one idempotent step and an ack. Keeping them here leaves ``core`` about the turn itself.
"""

from __future__ import annotations

import functools
import logging

from bot.bus.base import Delivery, EventBus
from bot.bus.topics import DEAD_LETTERS, DELETIONS
from bot.events import ChatMessage, DeadLetter, MessageDeleted
from bot.ops.metrics import MetricsSink
from bot.state.history import HistoryStore
from bot.state.outages import until_redis_answers

log = logging.getLogger("chorus.router")


async def consume_deletions(bus: EventBus, history: HistoryStore) -> None:
    """Apply every deletion (a message, or all of an author's lines) until intake stops. A
    deletion is acked once applied or found impossible; one cut short by a shutdown is not,
    so the next worker applies it."""
    async for delivery in bus.consume(DELETIONS, MessageDeleted, group="agent"):
        event = delivery.event
        try:
            removed = await until_redis_answers(
                "apply a deletion", functools.partial(_delete, history, event)
            )
            log.info(
                "deleted from history",
                extra={
                    "conversation": str(event.conversation),
                    "message_id": event.message_id,
                    "author_id": event.author_id,
                    "removed": removed,
                },
            )
        except Exception:
            log.exception(
                "could not apply a deletion", extra={"conversation": str(event.conversation)}
            )
        await delivery.ack()


async def _delete(history: HistoryStore, event: MessageDeleted) -> int:
    if event.message_id is not None:
        return await history.delete_message(event.conversation, event.message_id)
    if event.author_id is not None:
        return await history.forget_author(event.conversation, event.author_id)
    return 0


async def dead_letter(bus: EventBus, metrics: MetricsSink, delivery: Delivery[ChatMessage]) -> None:
    """A message every worker so far died or failed on: keep it for an operator and stop
    its redeliveries, instead of letting it take down worker after worker forever."""
    message = delivery.event
    log.error(
        "message delivered too often without an answer; moved to dead letters",
        extra={
            "platform": message.platform,
            "message_id": message.id,
            "attempts": delivery.attempt,
        },
    )
    reason = f"delivered {delivery.attempt} times without an answer"
    letter = DeadLetter(message=message, attempts=delivery.attempt, reason=reason)
    await bus.publish(DEAD_LETTERS, letter)  # the bus itself rides out Redis outages
    metrics.dead_letter(message.platform)
    await delivery.ack()
