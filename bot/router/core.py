"""The router: inbound message -> dedupe -> command or agent turn -> reply -> history.

Messages of one conversation are handled strictly in order by one worker task per active
conversation; different conversations run concurrently up to a limit, and at most
``max_in_flight`` are held at once, running or queued (``flow``: a burst waits on the bus).
``shutdown`` stops intake, lets the turns in progress finish within a grace (the commit
shielded), then cancels the rest, releasing their claims and leaving their deliveries unacked
for the next worker. The router keeps a reference to every task it spawns.

Delivery is at-least-once, so each message is claimed in Redis with ``SET NX`` before work
starts and marked done in the same pipeline that appends the history: a redelivered message that
was already answered is skipped, never answered twice. A Redis outage mid-turn is waited out
(``bot.state.outages``): the answer is kept and recorded once Redis is back, never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Coroutine
from typing import Any

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.agent.reasoning import decide
from bot.bus.base import Delivery, EventBus, TransactionalBus
from bot.bus.claims import Claim, Claims, default_worker_id
from bot.bus.topics import DELETIONS, INBOUND, outbound_topic
from bot.engagement.policy import Action
from bot.engagement.turns import LiveChat, ack
from bot.events import ChatMessage, ConversationKey, Reply, utcnow
from bot.llm.errors import LLMError
from bot.memory.buffers import MemoryStore
from bot.ops.aio import shielded
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.plugins.runtime import TurnHooks
from bot.router import record, safety_hooks
from bot.router.drafts import Drafts
from bot.router.flow import Admission, Shutdown, admit, release_quietly
from bot.router.housekeeping import consume_deletions, dead_letter
from bot.router.items import Item, answer_item, turn_item
from bot.router.observe import TurnObserver
from bot.router.scoping import FixedScoping, Profile, Scoping
from bot.router.text_commands import Commands
from bot.router.texts import apology, crash_apology, too_long
from bot.router.turn import RouterLimits
from bot.state.history import HistoryStore
from bot.state.outages import until_redis_answers
from bot.tools.base import ToolContext
from bot.tools.toolbox import Toolbox

log = logging.getLogger("chorus.router")

__all__ = ["Router", "RouterLimits", "apology", "crash_apology", "too_long"]


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
        hooks: TurnHooks | None = None,
        safety: safety_hooks.SafetyGate | None = None,
        scoping: Scoping | None = None,
    ) -> None:
        """``scoping``: each message's profile from chorus.toml's scopes; without it every
        message gets ``assembler``, ``agent`` and the reasoning of ``limits``."""
        self.metrics: MetricsSink = metrics or NullMetrics()
        self.hooks = hooks or TurnHooks()  # the plugins' before_turn and after_reply
        self.safety = safety or safety_hooks.SafetyGate()  # moderation, user lists, quotas
        self.bus = bus
        # a runtime Protocol check costs ~10 us; the bus never changes, so it is made once
        self._transactional = bus if isinstance(bus, TransactionalBus) else None
        self.redis = redis
        self.history = history
        self.assembler = assembler
        self.agent = agent
        self.commands = commands
        self.tools = tools
        self.memory = memory
        self.limits = limits or RouterLimits()
        self.scoping = scoping or FixedScoping.of(assembler, agent, self.limits)
        self.claims = Claims(
            redis,
            worker_id=worker_id or default_worker_id(),
            lease_ms=self.limits.claim_lease_ms,
            done_seconds=self.limits.done_seconds,
        )
        self.live = live
        self.drafts = Drafts(bus, lambda _: False)  # streamed answers: app.py sets the real one
        self.recall: record.Recall | None = None  # semantic recall, knowledge: app.py sets it
        self._queues: dict[ConversationKey, deque[Item]] = {}
        self._workers: dict[ConversationKey, asyncio.Task[None]] = {}
        self._acks: set[asyncio.Task[None]] = set()
        self._slots = asyncio.Semaphore(self.limits.concurrency)
        self.admission = Admission(self.limits.max_in_flight)
        self._loops: set[asyncio.Task[None]] = set()  # the consume loops
        self._ticker: asyncio.Task[None] | None = None
        self._running = 0
        self._hurry = asyncio.Event()
        self._shutdown: Shutdown | None = None
        self._touched = record.TouchThrottle()
        self.clock: Callable[[], float] = time.monotonic  # for the activity throttle
        self.observer = TurnObserver(redis)  # the turn log and timeline (the admin dashboard)

    async def run(self) -> None:
        """Consume the inbound and deletion topics until the bus closes or ``shutdown``."""
        async with asyncio.TaskGroup() as group:
            consumers = [
                group.create_task(self._consume_inbound()),
                group.create_task(consume_deletions(self.bus, self.history)),
            ]
            self._ticker = group.create_task(self._tick_forever())
            self._loops.update(consumers)
            await asyncio.wait(consumers)
            if self._ticker is not None:
                self._ticker.cancel()
        await self.join()

    @property
    def in_flight(self) -> int:
        """Messages held now, running or queued behind their conversation."""
        return self.admission.held

    @property
    def queued(self) -> int:
        """Messages waiting behind a busy conversation (or for a concurrency slot)."""
        return sum(len(queue) for queue in self._queues.values())

    async def shutdown(self, grace: float) -> None:
        """Stop taking messages; let the turns in progress finish for up to ``grace`` seconds
        (``hurry`` cuts it short); then cancel what is left, releasing each cancelled turn's
        claim. Queued messages are not started. A message not answered is not acked, so the
        bus hands it to the next worker. Call before closing the bus (acks need it open)."""
        if self._shutdown is not None:
            await self._shutdown.done.wait()
            return
        stop = self._shutdown = Shutdown(grace, hurry=self._hurry)
        stop.begin(self._running, self.admission.held - self._running)
        self.admission.close()
        if self._ticker is not None:
            self._ticker.cancel()  # no more live-chat turns
        for topic in (INBOUND, DELETIONS):
            await self.bus.stop_consuming(topic, "agent")
        left = await stop.wait({*self._workers.values(), *self._acks, *self._loops})
        await stop.abandon(left)
        await self.observer.flush_quietly(force=True)
        stop.end()

    def hurry(self) -> None:
        """End the shutdown grace now (a second SIGTERM or SIGINT)."""
        self._hurry.set()

    async def _tick_forever(self) -> None:
        """Check once a second whether a live-chat batch or idle line came due."""
        while True:
            await asyncio.sleep(1.0)
            await self.observer.flush_quietly()
            if self.live is not None:
                await self.live.maintain()  # durable live state: save, refresh, evict
            self.live_tick()

    def live_tick(self) -> int:
        """Queue the live-chat turns that came due (tests call this instead of waiting)."""
        if self.live is None or self._shutdown is not None:
            return 0
        turns = self.live.tick()
        for turn in turns:
            self.admission.take()
            self._enqueue(turn_item(turn))
        return len(turns)

    async def _consume_inbound(self) -> None:
        deliveries = self.bus.consume(INBOUND, ChatMessage, group="agent")
        await admit(deliveries, self.admission, self._admit, lambda: self._shutdown)

    async def _admit(self, delivery: Delivery[ChatMessage]) -> None:
        profile = self.scoping.profile(delivery.event)  # first: it learns the channel's server
        if self.live is not None:  # a channel's durable state, when it becomes active here
            await self.live.prepare(delivery.event)
        self._dispatch(delivery, profile)

    async def join(self) -> None:
        while self._workers:
            await asyncio.gather(*list(self._workers.values()), return_exceptions=True)

    async def close(self) -> None:
        """Stop at once: ``shutdown`` without a grace."""
        await self.shutdown(0)

    def _dispatch(self, delivery: Delivery[ChatMessage], profile: Profile) -> None:
        """Queue the delivery's turn (it holds the admission slot the consume loop took), or
        settle it at once (dead letter, a live-chat line not answered now) and free the slot."""
        message = delivery.event
        if delivery.attempt > self.limits.max_deliveries:
            self._background(dead_letter(self.bus, self.metrics, delivery), slot=True)
            return
        self.metrics.message_in(message.platform)
        self.observer.arrived(message)
        item = Item(message, delivery, (message.author.id,), message.id)
        if safety_hooks.screened_out(self, item):  # blocked or flagged: dropped or refused
            return
        route = profile.route(message, self.live is not None and self.live.applies(message))
        if route == "ignore":  # the scope answers only when addressed
            self.observer.note(message, "ignored", "not addressed")
            self._background(delivery.ack(), slot=True)
            return
        if route == "live" and self.live is not None:
            decision = self.live.observe(message)  # arrival order and time, O(1)
            self.metrics.engagement(message.platform, decision.action.value)
            if decision.action is Action.ANSWER_NOW:
                item = answer_item(delivery, decision)
            elif decision.action is Action.COMMAND and (text := ack(decision.reason)):
                item = Item(message, delivery, (message.author.id,), message.id, forced=text)
            else:
                self.observer.live_quiet(message, decision)
                self._background(delivery.ack(), slot=True)
                return
        self._enqueue(item)

    def _background(self, work: Coroutine[Any, Any, None], *, slot: bool = False) -> None:
        """Run ``work`` as a tracked task; ``slot``: free an admission slot as it ends."""
        task = asyncio.create_task(self.admission.freeing(work) if slot else work)
        self._acks.add(task)
        task.add_done_callback(self._acks.discard)

    def _enqueue(self, item: Item) -> None:
        conv = item.message.conversation
        self._queues.setdefault(conv, deque()).append(item)
        if conv not in self._workers:
            self._workers[conv] = asyncio.create_task(self._drain(conv), name=f"conv:{conv}")

    async def _drain(self, conv: ConversationKey) -> None:
        queue = self._queues[conv]
        try:
            while queue and self._shutdown is None:
                async with self._slots:
                    if self._shutdown is not None:
                        break  # stopping: what has not started is left for the next worker
                    item = queue.popleft()
                    try:
                        await self._turn(item)
                    finally:
                        self.admission.release()
        finally:
            self._workers.pop(conv, None)
            if queue and self._shutdown is not None:
                self._shutdown.returned += len(queue)
            for _ in range(len(queue)):
                self.admission.release()
            self._queues.pop(conv, None)

    async def _turn(self, item: Item) -> None:
        self._running += 1
        ended = False
        try:
            await self._handle(item)
            ended = True
        finally:
            self._running -= 1
            if self._shutdown is not None:
                self._shutdown.count(ended or item.progress.committed)

    async def _handle(self, item: Item) -> None:
        message = item.message
        claim = self.claims.new(message.platform, message.id)
        profile = self.scoping.profile(message)
        memory = self.memory if profile.memory else None
        settled = False  # answered, skipped or apologised for: ack (else another worker redoes it)
        try:
            read = await until_redis_answers(
                "read a turn",
                lambda: record.read_turn(
                    self.redis, self.history, memory, message, claim, self.recall, profile
                ),
            )
            if read is None:
                log.info(
                    "duplicate message skipped",
                    extra={"platform": message.platform, "message_id": message.id},
                )
                settled = True
                return
            if self.live is not None:  # where replies cost quota, reserve before the model
                paid, item.progress.hold = await self.live.pay(message, item.kind, item.mentions)
                if not paid:  # declined or held back (logged and counted); nothing to send
                    self.observer.note(message, "over_quota", "reply budget")
                    await claim.release()
                    settled = True
                    return
            async with claim.renewing():
                await self._answer(item, claim, read, profile)
            settled = True
        except asyncio.CancelledError:
            settled = item.progress.committed
            if not settled:  # give the message back now, not when the lease lapses
                await shielded(release_quietly(claim))
            raise
        except Exception:
            log.exception(
                "failed to handle message",
                extra={"platform": message.platform, "message_id": message.id},
            )
            with contextlib.suppress(Exception):
                await claim.release()
            await self._send(item, crash_apology(), is_error=True)
            settled = True
        finally:
            if settled and item.delivery is not None:
                await shielded(item.delivery.ack())

    async def _answer(
        self, item: Item, claim: Claim, read: record.TurnRead, profile: Profile
    ) -> None:
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
        if await safety_hooks.stopped(self, item, claim):  # over a quota, or flagged by a model
            return

        context = record.context_for(read, message, self.memory, utcnow())
        if item.context:
            context = f"{item.context}\n{context}" if context else item.context
        context = await self.hooks.before_turn(message, context)
        ctx = ToolContext(message=message, tools=profile.tools)
        request = profile.assembler.build(
            message,
            read.history,
            tools=self.tools.specs_for(ctx) if self.tools else (),
            context=context,
            reasoning=decide(message.text, profile.reasoning, profile.reasoning_max),
        )
        drafts = self.drafts.open(message, item.reply_to_id, item.addressed)  # None: not streamed
        try:
            result = await profile.agent.run(request, ctx, drafts)
        except LLMError as exc:
            self.observer.llm_failed(self.metrics, message, request.model, exc)
            await claim.release()  # a later delivery of the same message may try again
            await self._send(item, apology(), is_error=True)
            return
        now, text = utcnow(), await safety_hooks.answered(self, item, result, request)
        self.observer.answered(item, result, request, item.received)
        kept = record.Kept(record.turn_entries(message, text, now), now, profile, read.waiting)
        await self._finish(item, claim, text, kept=kept)
        self.hooks.after_reply(message, text)  # what was sent: the safe line if replaced
        self.metrics.observe_overhead(
            time.perf_counter() - item.received - result.llm_seconds - result.tool_seconds
        )
        lag = (utcnow() - message.sent_at).total_seconds()
        self.metrics.observe_ingest_to_reply(message.platform, max(lag, 0.0))

    async def _finish(
        self,
        item: Item,
        claim: Claim,
        text: str,
        *,
        is_error: bool = False,
        kept: record.Kept | None = None,
    ) -> None:
        """The reply and its record (history, done marker, memory activity, the insights job)
        in ONE transaction; the reply rides inside it when the bus is transactional. Shielded:
        a cancellation (the shutdown grace running out) waits for it instead of cutting it."""
        message = item.message
        reply = self._reply(item, text, is_error=is_error)
        topic = outbound_topic(message.platform)
        transactional = self._transactional
        # On a transactional bus the delivery's ack rides in the commit too (one round trip
        # fewer); ``ack`` after it then only settles the consumer's bookkeeping.
        delivery = item.delivery if transactional is not None else None

        def fill(pipe: Pipeline) -> None:
            if transactional is not None:
                transactional.queue_publish(pipe, topic, reply)
            if delivery is not None:
                delivery.queue_ack(pipe)
            if kept is not None:
                kept.queue_history(pipe, self.history, message.conversation)
            if kept is not None and kept.activity is not None and self.memory is not None:
                touch = self._touched.due(message, self.clock())
                record.queue_activity(pipe, self.memory, message, kept, touch)
            if self.live is not None:  # what the turn decided (answered, cooldowns, pause)
                self.live.queue_save(pipe, message)
            self.safety.queue_turn(pipe, message)  # the turn's tokens and cost, when limited

        async def write() -> None:
            if transactional is None:
                await self.bus.publish(topic, reply)
            await record.commit(self.claims, claim, message, fill)
            item.progress.committed = True
            if claim.recorded and delivery is not None:
                delivery.acked_in_commit()

        await shielded(write())
        self.observer.committed(item, is_error=is_error)  # the turn log, written by the tick
        self.metrics.message_out(message.platform)
        if self.live is not None:
            self.live.spoke(message.conversation)

    def _reply(self, item: Item, text: str, *, is_error: bool) -> Reply:
        message = item.message
        return Reply(
            conversation=message.conversation,
            text=self.safety.guard(message, text),  # every reply's last check
            reply_to_id=item.reply_to_id,
            addressed_user_ids=item.addressed,
            in_reply_to_platform=message.platform,
            is_error=is_error,
            budget_hold=item.progress.hold,
        )

    async def _send(self, item: Item, text: str, *, is_error: bool = False) -> None:
        """A reply outside any transaction (apologies after a failure)."""
        reply = self._reply(item, text, is_error=is_error)
        await self.bus.publish(outbound_topic(item.message.platform), reply)
        self.metrics.message_out(item.message.platform)
        if self.live is not None:
            self.live.spoke(item.message.conversation)
