"""The router: inbound message -> dedupe -> command or agent turn -> reply -> history.

Messages of one conversation are handled strictly in order by one worker task per active
conversation; different conversations run concurrently up to a limit. The router keeps a
reference to every task it spawns and cancels them on ``close``.

Delivery is at-least-once, so each message is claimed in Redis with ``SET NX`` before work
starts and marked done in the same pipeline that appends the history: a redelivered message that
was already answered is skipped, never answered twice.

A Redis outage mid-turn is waited out (``bot.state.outages``): the read is retried, the answer is
kept and recorded once Redis is back, so a restart costs latency, not answers or apologies.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

import prompts
from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.agent.reasoning import Level, decide
from bot.bus.base import Delivery, EventBus, TransactionalBus
from bot.bus.claims import Claim, Claims, default_worker_id
from bot.bus.topics import DEAD_LETTERS, DELETIONS, INBOUND, outbound_topic
from bot.events import ChatMessage, ConversationKey, DeadLetter, MessageDeleted, Reply, utcnow
from bot.live.engagement import Action
from bot.live.turns import LiveChat, ack, covered_context
from bot.llm.errors import LLMError
from bot.memory.buffers import MemoryStore, UserBuffer
from bot.memory.enrichment import render_context
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.router.record import TouchThrottle, queue_activity, turn_entries
from bot.router.text_commands import Commands
from bot.state.history import HistoryEntry, HistoryStore
from bot.state.outages import until_redis_answers
from bot.tools.base import ToolContext
from bot.tools.toolbox import Toolbox

log = logging.getLogger("chorus.router")


def too_long(length: int, limit: int) -> str:
    """The refusal of a message over ``CHORUS_MAX_MESSAGE_CHARS``."""
    return prompts.render("router/too_long", length=f"{length:,}", limit=f"{limit:,}")


def apology() -> str:
    """The reply when no model answered (after retries and fallbacks)."""
    return prompts.render("router/llm_unavailable")


def crash_apology() -> str:
    """The reply when answering failed for any other reason (a bug, logged)."""
    return prompts.render("router/crash")


@dataclass(frozen=True)
class _Item:
    """One turn to run: an inbound message (with its delivery, acked after), or a live-chat
    turn the policy made (a batch or an idle line: no delivery)."""

    message: ChatMessage
    delivery: Delivery[ChatMessage] | None
    addressed: tuple[str, ...]
    reply_to_id: str | None
    context: str = ""
    forced: str | None = None  # a fixed answer (live-chat pause/resume acknowledgements)
    received: float = field(default_factory=time.perf_counter)  # for the overhead metric


@dataclass(frozen=True)
class _Read:
    history: list[HistoryEntry]
    buffer: UserBuffer | None


@dataclass(frozen=True)
class RouterLimits:
    max_message_chars: int = 8000
    reasoning: str = "auto"
    reasoning_max: Level = "medium"
    concurrency: int = 32
    claim_lease_ms: int = 10_000
    max_deliveries: int = 3  # a message delivered more often goes to dead letters
    done_seconds: int = 3 * 24 * 3600


class Router:
    def __init__(
        self,
        *,
        bus: EventBus,
        redis: Redis,
        history: HistoryStore,
        assembler: PromptAssembler,
        agent: Agent,
        commands: Commands,
        tools: Toolbox | None = None,
        memory: MemoryStore | None = None,
        limits: RouterLimits | None = None,
        worker_id: str | None = None,
        live: LiveChat | None = None,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.metrics: MetricsSink = metrics or NullMetrics()
        self.bus = bus
        self.redis = redis
        self.history = history
        self.assembler = assembler
        self.agent = agent
        self.commands = commands
        self.tools = tools
        self.memory = memory
        self.limits = limits or RouterLimits()
        self.claims = Claims(
            redis,
            worker_id=worker_id or default_worker_id(),
            lease_ms=self.limits.claim_lease_ms,
            done_seconds=self.limits.done_seconds,
        )
        self.live = live
        self._queues: dict[ConversationKey, deque[_Item]] = {}
        self._workers: dict[ConversationKey, asyncio.Task[None]] = {}
        self._acks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(self.limits.concurrency)
        self._touched = TouchThrottle()
        self.clock: Callable[[], float] = time.monotonic  # for the activity throttle

    async def run(self) -> None:
        """Consume the inbound and deletion topics until the bus closes."""
        async with asyncio.TaskGroup() as group:
            consumers = [
                group.create_task(self._consume_inbound()),
                group.create_task(self._consume_deletions()),
            ]
            ticker = group.create_task(self._tick_forever()) if self.live else None
            await asyncio.gather(*consumers)
            if ticker is not None:
                ticker.cancel()
        await self.join()

    async def _tick_forever(self) -> None:
        """Check once a second whether a live-chat batch or idle line came due."""
        while True:
            await asyncio.sleep(1.0)
            if self.live is not None:
                await self.live.maintain()  # durable live state: save, refresh, evict
            self.live_tick()

    def live_tick(self) -> int:
        """Queue the live-chat turns that came due (tests call this instead of waiting)."""
        if self.live is None:
            return 0
        turns = self.live.tick()
        for turn in turns:
            self._enqueue(_Item(turn.message, None, turn.addressed, turn.reply_to_id, turn.context))
        return len(turns)

    async def _consume_inbound(self) -> None:
        async for delivery in self.bus.consume(INBOUND, ChatMessage, group="agent"):
            if self.live is not None:  # a channel's durable state, when it becomes active here
                await self.live.prepare(delivery.event)
            self._dispatch(delivery)

    async def _consume_deletions(self) -> None:
        async for delivery in self.bus.consume(DELETIONS, MessageDeleted, group="agent"):
            event = delivery.event
            try:
                removed = await until_redis_answers(
                    "apply a deletion", functools.partial(self._delete, event)
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
            finally:
                await delivery.ack()

    async def _delete(self, event: MessageDeleted) -> int:
        if event.message_id is not None:
            return await self.history.delete_message(event.conversation, event.message_id)
        if event.author_id is not None:
            return await self.history.forget_author(event.conversation, event.author_id)
        return 0

    async def join(self) -> None:
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._workers.values()):
            task.cancel()
        await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    def _dispatch(self, delivery: Delivery[ChatMessage]) -> None:
        message = delivery.event
        if delivery.attempt > self.limits.max_deliveries:
            self._background(self._dead_letter(delivery))
            return
        self.metrics.message_in(message.platform)
        item = _Item(message, delivery, (message.author.id,), message.id)
        if self.live is not None and self.live.applies(message):
            decision = self.live.observe(message)  # arrival order and time, O(1)
            self.metrics.engagement(message.platform, decision.action.value)
            if decision.action is Action.ANSWER_NOW:
                item = _Item(
                    message, delivery, (message.author.id,), message.id, covered_context(decision)
                )
            elif decision.action is Action.COMMAND and (text := ack(decision.reason)):
                item = _Item(message, delivery, (message.author.id,), message.id, forced=text)
            else:
                log.debug(
                    "live chat: not answered now",
                    extra={
                        "message_id": message.id,
                        "action": decision.action.value,
                        "reason": decision.reason.value,
                    },
                )
                self._background(delivery.ack())
                return
        self._enqueue(item)

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    async def _dead_letter(self, delivery: Delivery[ChatMessage]) -> None:
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
        await self.bus.publish(DEAD_LETTERS, letter)  # the bus itself rides out Redis outages
        self.metrics.dead_letter(message.platform)
        await delivery.ack()

    def _enqueue(self, item: _Item) -> None:
        conv = item.message.conversation
        self._queues.setdefault(conv, deque()).append(item)
        if conv not in self._workers:
            self._workers[conv] = asyncio.create_task(self._drain(conv), name=f"conv:{conv}")

    async def _drain(self, conv: ConversationKey) -> None:
        queue = self._queues[conv]
        try:
            while queue:
                item = queue.popleft()
                async with self._slots:
                    await self._handle(item)
        finally:
            self._workers.pop(conv, None)
            if not queue:
                self._queues.pop(conv, None)

    async def _handle(self, item: _Item) -> None:
        message = item.message
        claim = self.claims.new(message.platform, message.id)
        try:
            read = await until_redis_answers("read a turn", lambda: self._read(message, claim))
            if read is None:
                log.info(
                    "duplicate message skipped",
                    extra={"platform": message.platform, "message_id": message.id},
                )
                return
            async with claim.renewing():
                await self._answer(item, claim, read)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception(
                "failed to handle message",
                extra={"platform": message.platform, "message_id": message.id},
            )
            with contextlib.suppress(Exception):
                await claim.release()
            await self._send(item, crash_apology(), is_error=True)
        finally:
            if item.delivery is not None:
                await item.delivery.ack()

    async def _read(self, message: ChatMessage, claim: Claim | None) -> _Read | None:
        """Claim the message and read its history and the author's memory: ONE round trip.

        None when the message was answered already (at-least-once delivery must not mean
        answering twice). If another worker holds the claim, wait for it, then read again.
        """
        conv, author = message.conversation, message.author
        async with self.redis.pipeline(transaction=False) as pipe:
            if claim is not None:
                claim.queue_take(pipe)
            self.history.queue_load(pipe, conv)
            if self.memory is not None:
                self.memory.queue_load(pipe, message.platform, author.id)
            results = await pipe.execute()
        if claim is not None:
            outcome = claim.taken(results.pop(0))
            if outcome is None:
                return await self._read(message, None) if await claim.wait_and_take() else None
            if not outcome:
                return None
        history = self.history.parse_load(conv, results[0])
        buffer = None
        if self.memory is not None:
            buffer = self.memory.parse_load(
                results[1:], platform=message.platform, user_id=author.id
            )
        return _Read(history=history, buffer=buffer)

    async def _answer(self, item: _Item, claim: Claim, read: _Read) -> None:
        message = item.message
        if item.forced is not None:
            await self._finish(item, claim, item.forced)
            return
        if len(message.text) > self.limits.max_message_chars:
            text = too_long(len(message.text), self.limits.max_message_chars)
            await self._finish(item, claim, text, is_error=True)
            return
        command_reply = await self.commands.handle(message)
        if command_reply is not None:
            await self._finish(item, claim, command_reply)
            return

        context = ""
        if self.memory is not None and read.buffer is not None:
            context = render_context(read.buffer, message, self.memory.settings, utcnow())
        if item.context:
            context = f"{item.context}\n{context}" if context else item.context
        ctx = ToolContext(message=message)
        request = self.assembler.build(
            message,
            read.history,
            tools=self.tools.specs_for(ctx) if self.tools else (),
            context=context,
            reasoning=decide(message.text, self.limits.reasoning, self.limits.reasoning_max),
        )
        try:
            result = await self.agent.run(request, ctx)
        except LLMError as exc:
            self.metrics.llm_error(request.model, type(exc).__name__)
            log.error(
                "no answer from the model",
                extra={
                    "platform": message.platform,
                    "message_id": message.id,
                    "error": str(exc),
                    "error_type": type(exc).__name__,
                },
            )
            await claim.release()  # a later delivery of the same message may try again
            await self._send(item, apology(), is_error=True)
            return
        now = utcnow()
        entries = turn_entries(message, result.text, now)
        await self._finish(item, claim, result.text, entries=entries, activity=now)
        self.metrics.observe_overhead(
            time.perf_counter() - item.received - result.llm_seconds - result.tool_seconds
        )
        lag = (utcnow() - message.sent_at).total_seconds()
        self.metrics.observe_ingest_to_reply(message.platform, max(lag, 0.0))

    async def _finish(
        self,
        item: _Item,
        claim: Claim,
        text: str,
        *,
        is_error: bool = False,
        entries: tuple[HistoryEntry, ...] = (),
        activity: datetime | None = None,
    ) -> None:
        """The reply and its record (history, done marker, memory activity, the insights job)
        in ONE transaction; the reply rides inside it when the bus is transactional."""
        message = item.message
        reply = self._reply(item, text, is_error=is_error)
        topic = outbound_topic(message.platform)
        transactional = self.bus if isinstance(self.bus, TransactionalBus) else None
        if transactional is None:
            await self.bus.publish(topic, reply)

        def fill(pipe: Pipeline) -> None:
            if transactional is not None:
                transactional.queue_publish(pipe, topic, reply)
            if entries:
                self.history.queue_append(pipe, message.conversation, *entries)
            if activity is not None and self.memory is not None:
                touch = self._touched.due(message, self.clock())
                queue_activity(pipe, self.memory, message, activity, touch=touch)
            if self.live is not None:  # what the turn decided (answered, cooldowns, pause)
                self.live.queue_save(pipe, message)

        await claim.commit(fill)
        self.metrics.message_out(message.platform)
        if self.live is not None:
            self.live.spoke(message.conversation)

    def _reply(self, item: _Item, text: str, *, is_error: bool) -> Reply:
        message = item.message
        return Reply(
            conversation=message.conversation,
            text=text,
            reply_to_id=item.reply_to_id,
            addressed_user_ids=item.addressed,
            in_reply_to_platform=message.platform,
            is_error=is_error,
        )

    async def _send(self, item: _Item, text: str, *, is_error: bool = False) -> None:
        """A reply outside any transaction (apologies after a failure)."""
        reply = self._reply(item, text, is_error=is_error)
        await self.bus.publish(outbound_topic(item.message.platform), reply)
        self.metrics.message_out(item.message.platform)
        if self.live is not None:
            self.live.spoke(item.message.conversation)
