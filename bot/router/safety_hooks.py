"""Where the message path meets the safety gate (``bot.safety.gate``), kept out of ``core``.

``core`` calls three hooks and the gate's ``prepare``, ``answer``, ``queue_turn`` and ``guard``:

- ``screened_out`` at dispatch: a flagged or blocked message is acked and dropped (a live-chat
  line never reaches the ledger) or answered with the refusal, a fixed answer that never calls
  the model;
- ``stopped`` before the model: the quota and the moderation model; a stop is answered with its
  notice, or settled without a reply (a second message over the same limit): marked done in
  Redis like any answered message, so a redelivery is not answered either;
- ``answered`` after the model: the outbound check, and the turn's usage kept for the commit.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Coroutine
from typing import Any, Protocol

from redis.asyncio.client import Pipeline

from bot.agent.loop import AgentResult
from bot.bus.claims import Claim, Claims
from bot.engagement.turns import LiveChat
from bot.llm.types import LLMRequest
from bot.ops.aio import shielded
from bot.router import record
from bot.router.observe import TurnObserver
from bot.safety.gate import SafetyGate
from bot.state.turnlog import Decision

__all__ = ["SafetyGate", "answered", "screened_out", "stopped"]


class Router(Protocol):
    """What the hooks use of ``bot.router.core.Router`` (which imports this module)."""

    safety: SafetyGate
    live: LiveChat | None
    claims: Claims
    observer: TurnObserver

    def _background(self, work: Coroutine[Any, Any, None], *, slot: bool = False) -> None: ...

    def _enqueue(self, item: Any) -> None: ...

    async def _finish(self, item: Any, claim: Claim, text: str) -> None: ...


def screened_out(router: Router, item: Any) -> bool:
    """True when the gate took the message out of the normal path (dropped or refused)."""
    screened = router.safety.screen(item.message)
    if screened.action == "pass":
        return False
    if screened.text is None:
        assert item.delivery is not None
        router.observer.note(item.message, "moderated", "dropped")
        router._background(item.delivery.ack(), slot=True)
    else:
        router.observer.decided(item, "moderated", "refused")
        router._enqueue(dataclasses.replace(item, forced=screened.text))
    return True


async def stopped(router: Router, item: Any, claim: Claim) -> bool:
    """True when the model must not be called for this turn (and the turn is settled)."""
    stop = await router.safety.before_model(item.message, person=item.delivery is not None)
    if stop is None:
        return False
    decision: Decision = "over_quota" if stop.why.startswith("quota") else "moderated"
    router.observer.decided(item, decision, stop.why)
    if stop.text is not None:
        await router._finish(item, claim, stop.text)
    else:
        await _settle_silently(router, item, claim)
    return True


async def answered(router: Router, item: Any, result: AgentResult, request: LLMRequest) -> str:
    """The answer to send (the safe line when it breaks a rule); its usage waits for the
    commit (``SafetyGate.queue_turn``)."""
    message = item.message
    text = await router.safety.answer(message, result.text)
    router.safety.hold_usage(message, result.usage, request.model, item.delivery is not None)
    return text


async def _settle_silently(router: Router, item: Any, claim: Claim) -> None:
    """Mark the message done without a reply (the user already has the period's notice)."""
    message = item.message

    def fill(pipe: Pipeline) -> None:
        if router.live is not None:
            router.live.queue_save(pipe, message)

    async def write() -> None:
        await record.commit(router.claims, claim, message, fill)
        item.progress.committed = True

    await shielded(write())
    router.observer.committed(item, sent=False)
