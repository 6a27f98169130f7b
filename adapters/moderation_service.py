"""The gateway's side of ``moderation:<platform>``: each ``ModerationRequest`` performed through
the platform adapter's moderation actions, and audited.

Decisions are made where messages are read (the ``moderation`` plugin, in a worker), actions
where the platform connection lives (the gateway), so a request crosses the bus like a reply
does. The adapter in charge is read per request (``current``): a supervised adapter that was
restarted is a new object with its own actions. A request the adapter cannot take (the
platform has no moderation actions, the adapter is restarting) is audited as ``failed``; a
request is acked once performed, whatever its outcome: an action is never repeated by itself.

Imported by the composition root only (``bot/cli.py``), as ``adapters.registry`` is.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

from bot.bus.base import EventBus
from bot.bus.topics import moderation_topic
from bot.events import ModerationRequest
from bot.platform.moderation import (
    Action,
    ActionAudit,
    ActionResult,
    AuditedActions,
    ModerationActions,
    Outcome,
    perform,
)
from bot.platform.supervisor import Slot

log = logging.getLogger("chorus.moderation")


async def serve(
    bus: EventBus,
    platform: str,
    current: Callable[[], ModerationActions | None],
    audit: ActionAudit,
) -> None:
    """Perform every request on ``moderation:<platform>`` until cancelled."""
    topic = moderation_topic(platform)
    async for delivery in bus.consume(topic, ModerationRequest, group="moderation"):
        request = delivery.event
        try:
            result = await handle(request, current(), audit)
            log.info(
                "moderation action",
                extra={
                    "platform": platform,
                    "action": request.action,
                    "outcome": str(result.outcome),
                    "conversation": str(request.conversation),
                    "user_id": request.user_id,
                    "message_id": request.message_id,
                },
            )
        except Exception:
            log.exception("moderation action failed", extra={"action": request.action})
        await delivery.ack()


async def handle(
    request: ModerationRequest, actions: ModerationActions | None, audit: ActionAudit
) -> ActionResult:
    """``request`` through ``actions`` (audited); without actions: audited as failed."""
    if actions is None:
        result = ActionResult(
            Action(request.action), Outcome.FAILED, "no moderation actions on this platform now"
        )
        audit(
            platform=request.conversation.platform,
            conversation=str(request.conversation),
            action=request.action,
            outcome=str(result.outcome),
            user_id=request.user_id or "",
            message_id=request.message_id or "",
            actor=request.actor,
            reason=request.reason,
        )
        return result
    return await perform(AuditedActions(actions, audit), request)


@asynccontextmanager
async def serving(bus: EventBus, slots: Sequence[Slot], audit: ActionAudit) -> AsyncIterator[None]:
    """Serve ``moderation:<platform>`` for every supervised platform while the block runs."""

    def actions_of(slot: Slot) -> Callable[[], ModerationActions | None]:
        return lambda: getattr(slot.adapter, "moderation", None)

    tasks = [
        asyncio.create_task(
            serve(bus, slot.platform, actions_of(slot), audit), name=f"moderation-{slot.platform}"
        )
        for slot in slots
    ]
    try:
        yield
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
