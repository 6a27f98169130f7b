"""What the router tells the admin dashboard: a record of every decision (the turn log), the
per-minute counters (the timeline) and the indexes they feed (bot/state/turnlog.py).

Why apart from the stages: they decide; this module writes down what they decided, cheaply.
Every decision -- an answer once its commit went through, a live line batched or let go, a
screened message, a turn the budget could not pay -- becomes a record held in memory (a list
append), and the router's one-second tick writes what was held in one batch (``flush``), and
its stop writes the rest. So a record costs the reply path no Redis command and no round trip
at all (``BENCHMARKS.md`` has what one command per answered message would cost). What is held is
bounded (``PENDING_MAX``; past it the oldest records are dropped and counted); a crash loses at
most a second of records.

Within a flush: one ``LPUSH`` per conversation; the log's cap and TTL and the conversation's place
in the activity index are refreshed on its first records here and then at most every
``UPKEEP_SECONDS``; a person's name is indexed at most every ``NAMES_SECONDS``; the timeline's
counts go out every ``TIMELINE_SECONDS`` (and at the stop), whatever the traffic.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from cachetools import TTLCache

from bot.agent.loop import AgentResult
from bot.engagement.policy import Decision as LiveDecision
from bot.events import ChatMessage, ConversationKey, utcnow
from bot.llm.errors import LLMError
from bot.llm.pricing import PriceTable
from bot.llm.types import LLMRequest, Usage
from bot.ops.metrics import MetricsSink
from bot.router.items import Item
from bot.state.rollups import latency_field
from bot.state.turnlog import Decision, Timeline, TurnLog, TurnRecord

log = logging.getLogger("chorus.router")

PENDING_MAX = 10_000
UPKEEP_SECONDS = 10.0
NAMES_SECONDS = 600.0
TIMELINE_SECONDS = 10.0
THROTTLE_CAPACITY = 10_000


class Throttle:
    """Remembers which keys were done in the last ``every`` seconds: ``due`` says whether it is
    time. A ``cachetools.TTLCache`` on the times ``due`` is given, at most ``capacity`` keys (the
    least recently done dropped first)."""

    def __init__(self, every: float, capacity: int = THROTTLE_CAPACITY) -> None:
        self.every = every
        self.capacity = capacity
        self._now = 0.0
        self._done: TTLCache[object, None] = TTLCache(capacity, every, timer=lambda: self._now)

    def due(self, key: object, now: float) -> bool:
        self._now = now
        if key in self._done:
            return False
        self._done[key] = None
        return True


class TurnObserver:
    """The turn log and timeline of one router."""

    def __init__(self, log: TurnLog | None, prices: PriceTable | None = None) -> None:
        """``log``: where the records go (None: they are held, bounded, and never written)."""
        self.log = log
        self.prices = prices or PriceTable.default()
        self.timeline = Timeline()
        self.pending: deque[tuple[ConversationKey, TurnRecord]] = deque()
        self.dropped = 0
        self.clock: Callable[[], float] = time.monotonic
        self._upkept = Throttle(UPKEEP_SECONDS)
        self._named = Throttle(NAMES_SECONDS)
        self._timeline_at: float | None = None  # when the timeline was last sent

    # -- what happened ---------------------------------------------------------------------------
    def arrived(self, message: ChatMessage) -> None:
        self.timeline.count(f"in:{message.platform}")

    def note(self, message: ChatMessage, decision: Decision, reason: str = "") -> None:
        """A decision that sends no reply now."""
        self._hold(message.conversation, _record(message, decision, reason))

    def _hold(self, conv: ConversationKey, record: TurnRecord) -> None:
        if len(self.pending) >= PENDING_MAX:
            self.pending.popleft()
            self.dropped += 1
        self.pending.append((conv, record))

    def decided(self, item: Item, decision: Decision, reason: str) -> None:
        """A turn answered without the model (a refusal, a notice): recorded once committed."""
        item.progress.record = _record(item.message, decision, reason)

    def live_quiet(self, message: ChatMessage, decision: LiveDecision) -> None:
        """The live-chat policy did not answer ``message`` now (batched, paused, cooling down)."""
        action, reason = decision.action.value, decision.reason.value
        log.debug(
            "live chat: not answered now",
            extra={"message_id": message.id, "action": action, "reason": reason},
        )
        self.note(message, "batched" if action == "queue" else "quiet", reason)

    def answered(
        self, item: Item, result: AgentResult, request: LLMRequest, received: float
    ) -> None:
        """The numbers of an answered turn; recorded once committed (``committed``)."""
        usage = result.usage
        cost = self.prices.cost(request.model, usage) or 0.0
        latency_ms = round((time.perf_counter() - received) * 1000)
        item.progress.record = _record(
            item.message,
            "answered",
            "batch" if item.delivery is None else "",
            model=request.model,
            prompt_tokens=usage.total_input_tokens,
            cache_share=round(usage.cache_read_share, 3),
            output_tokens=usage.output_tokens,
            tools=result.tool_calls,
            latency_ms=latency_ms,
            cost_usd=round(cost, 6),
        )
        timeline = self.timeline
        timeline.count("replies")
        timeline.count(latency_field(latency_ms))
        timeline.count("tokens_in", usage.total_input_tokens)
        timeline.count("tokens_out", usage.output_tokens)
        timeline.count("cache_read", usage.cache_read_tokens)
        timeline.cost(cost)

    def plugin_asked(
        self, message: ChatMessage, plugin: str, model: str, usage: Usage, seconds: float
    ) -> None:
        """A plugin's ``ctx.ask`` while handling ``message``: in the turn log beside its turns
        (its tokens, latency and cost), and in the timeline's tokens and cost."""
        cost = self.prices.cost(model, usage) or 0.0
        record = _record(
            message,
            "command",
            f"plugin {plugin} asked the model",
            model=model,
            prompt_tokens=usage.total_input_tokens,
            cache_share=round(usage.cache_read_share, 3),
            output_tokens=usage.output_tokens,
            latency_ms=round(seconds * 1000),
            cost_usd=round(cost, 6),
        )
        self._hold(message.conversation, record)
        self.timeline.count("tokens_in", usage.total_input_tokens)
        self.timeline.count("tokens_out", usage.output_tokens)
        self.timeline.cost(cost)

    def llm_failed(
        self, metrics: MetricsSink, message: ChatMessage, model: str, exc: LLMError
    ) -> None:
        """No answer from the model: counted, logged (the vendor's error, never a key), noted."""
        metrics.llm_error(model, type(exc).__name__)
        log.error(
            "no answer from the model",
            extra={
                "platform": message.platform,
                "message_id": message.id,
                "error": str(exc),
                "error_type": type(exc).__name__,
            },
        )
        self.timeline.count("errors")
        self.note(message, "error", type(exc).__name__)

    def committed(self, item: Item, *, is_error: bool = False, sent: bool = True) -> None:
        """A turn's commit went through: its record (answered, or the fixed answer it got) and
        the timeline's counts (``sent``: a reply went out with it)."""
        if not item.progress.committed:
            return  # another worker recorded it (a lapsed claim), or nothing was written
        message = item.message
        record = item.progress.record
        if record is None:
            decision: Decision = "error" if is_error else "command"
            record = _record(message, decision, "fixed answer" if item.forced else "")
            if is_error:
                self.timeline.count("errors")
        if sent:
            self.timeline.count(f"out:{message.platform}")
        self._hold(message.conversation, record)

    # -- writing ---------------------------------------------------------------------------------

    async def flush(self, *, force: bool = False) -> None:
        """What waits in memory, in one write of its own (the router's tick; ``force``: its
        stop, the timeline too even if it went out less than ``TIMELINE_SECONDS`` ago). A
        write that fails keeps the timeline's counts for the next one."""
        if self.log is None:
            return
        now = self.clock()
        last = self._timeline_at
        timeline = force or last is None or now - last >= TIMELINE_SECONDS
        if not self.pending and not (timeline and self.timeline.pending):
            return
        records, upkeep, names = self._batch(now)
        counts = self.timeline.take() if timeline else {}
        try:
            await self.log.write(records, upkeep=upkeep, names=names, counts=counts, now=utcnow())
        except BaseException:
            self.timeline.put_back(counts)
            raise
        if counts:
            self._timeline_at = now

    async def flush_quietly(self, *, force: bool = False) -> None:
        try:
            await self.flush(force=force)
        except Exception:  # the dashboard's records must never stop the chat
            log.warning("could not write the turn log", exc_info=True)

    def _batch(
        self, now: float
    ) -> tuple[
        dict[ConversationKey, list[TurnRecord]],
        set[ConversationKey],
        dict[str, set[tuple[str, str]]],
    ]:
        """The held records by conversation (taken), the conversations whose log is due its
        upkeep, and the names due their index entry, by platform."""
        by_conv: dict[ConversationKey, list[TurnRecord]] = {}
        for conv, record in self.pending:
            by_conv.setdefault(conv, []).append(record)
        self.pending.clear()
        upkeep = {conv for conv in by_conv if self._upkept.due(conv, now)}
        names: dict[str, set[tuple[str, str]]] = {}
        for conv, records in by_conv.items():
            for r in records:
                if r.user_id and self._named.due((conv.platform, r.user_id, r.user_name), now):
                    names.setdefault(conv.platform, set()).add((r.user_id, r.user_name))
        return by_conv, upkeep, names


def _record(message: ChatMessage, decision: Decision, reason: str, **numbers: Any) -> TurnRecord:
    author = message.author
    return TurnRecord(
        at=round(time.time(), 3),
        message_id=message.id,
        user_id=author.id,
        user_name=author.display_name or author.id,
        decision=decision,
        reason=reason,
        **numbers,
    )
