"""Live chat: the engagement policy (``bot/engagement/policy.py``) wired to the router's turns.

Which messages go through the policy: everything from live-chat platforms (Twitch, YouTube)
and every ``ambient`` message (Discord and Slack channels configured as ambient). Other
messages (DMs, mentions in normal channels) are simply answered.

The policy is pure and O(1) per message, so it runs at dispatch, in arrival order, with the
arrival time. Its decisions become turns of the router:

- answer now: the message's own turn (lines it covers are added to the context);
- a batch that came due (checked by ``tick``, once a second): ONE turn that addresses up to
  two chatters by name, as a synthetic message whose text lists their lines -- or, when
  mentions waited for the reply budget's pace (YouTube), up to ``max_mention_batch``
  mentioners at once;
- an idle line (optional per channel): one on-topic line after a quiet period;
- a thanks for a settled burst of stream events (``bot/engagement/thanks.py``, off by default per
  kind): ONE unprompted turn naming the people with what each did; the text a viewer wrote
  with an event goes through the engagement policy like any line (a mention is answered);
- ``!chorus pause`` / ``resume`` from the broadcaster or a moderator: a short acknowledgement.

A mention the ledger lets go unanswered (superseded by the same user's newer mention, stale,
overflow, paused) is never silent: each one is logged ("live chat: mention declined", with its
message id and reason) and counted as the engagement decision ``declined_<reason>``
(``chorus_engagement_decisions_total``) as soon as ``observe`` or ``tick`` lets it go.

Where replies cost quota (YouTube), the reply budget (``bot/quota/gate.py``) gates the turns:
``tick`` decides an unprompted turn (room batch, idle line, and any other turn nobody asked
for) only while the budget's room is open (a room batch held back is logged once, "live chat:
room batch held back for the reply budget", and counted ``held_budget``), and the router awaits
``pay`` before a turn's model runs: the turn's worst-case cost is reserved in the shared ledger,
the reply carries the hold, and a mention the budget cannot pay for is declined ``quota``.

What must outlive this process (the pause, cooldowns, which messages were answered) is kept
in a ``LiveStore`` by ``bot/engagement/durable.py``: the router awaits ``prepare`` before a message
(a store read only when a channel becomes active here), adds ``save_for`` to each reply's
commit and awaits ``maintain`` once a second. The policy's clock is epoch seconds, so stored
times mean the same in every process.

Everything a user wrote stays inside the prompt's data blocks, and only there: a batch turn's
synthetic message holds nothing but the chatters' lines (rendered as a ``<user_message>`` like
any other), each one escaped to one line of its real author (``bot/engagement/escape.py``); the
instructions (whom to answer, what is context) go in the turn's ``context``, which the prompt
places after the data block. The instructions and acknowledgements are ``prompts/live/*``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

import prompts
from bot.engagement.durable import DurableLedger
from bot.engagement.escape import one_line, speaker
from bot.engagement.ledger import ChannelState
from bot.engagement.policy import (
    Action,
    Batch,
    Decision,
    Engagement,
    PolicyConfig,
    Reason,
    due,
    idle_due,
    mark_spoke,
    observe,
    room_ready,
    take_declined,
)
from bot.engagement.thanks import Thanks, ThanksChannels, ThanksConfig, instructions, turn_text
from bot.events import Author, ChatMessage, ConversationKey
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.quota.gate import ReplyGate
from bot.quota.plan import Kind, QuotaConfig
from bot.settings import ConfigError, EngagementSettings, Settings
from bot.state.engagement import Changes, LiveStore, MemoryLiveStore
from bot.state.outages import until_redis_answers
from bot.state.turn import ChannelSave

log = logging.getLogger("chorus.live")

LIVE_PLATFORMS = frozenset({"twitch", "youtube"})
CHAT_AUTHOR = Author(id="chat", display_name="live chat")
MAINTAIN_TIMEOUT = 5.0  # seconds: the one-second tick never waits longer on the store


def ack(reason: Reason) -> str | None:
    """The acknowledgement of a ``!chorus pause``/``resume`` command; None for other reasons."""
    if reason is Reason.PAUSE:
        return prompts.render("live/pause_ack")
    if reason is Reason.RESUME:
        return prompts.render("live/resume_ack")
    return None


def policy_config(settings: EngagementSettings) -> PolicyConfig:
    """The policy's thresholds from the ``CHORUS_ENGAGE_*`` section (same field names)."""
    return PolicyConfig(**settings.thresholds())


def platform_overrides(settings: EngagementSettings) -> dict[str, PolicyConfig]:
    """``Engagement.overrides`` per platform (``CHORUS_ENGAGE_YOUTUBE_*``): the global
    thresholds with the platform's own on top; ``ConfigError`` naming the section if the two
    do not fit together."""
    base = settings.thresholds()
    overrides: dict[str, PolicyConfig] = {}
    for platform, values in settings.platform_thresholds().items():
        try:
            overrides[platform] = PolicyConfig(**(base | values))
        except ValidationError as exc:
            problem = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise ConfigError(
                f"CHORUS_ENGAGE_{platform.upper()}_* with the CHORUS_ENGAGE_* defaults: {problem}"
            ) from None
    return overrides


def replay_options(settings: Settings, youtube_read: str | None = None) -> dict[str, Any]:
    """What ``chorus replay`` runs with: the engagement thresholds (per platform too), the
    YouTube quota settings and how the chat is read (``youtube_read``, else the read mode)."""
    poll = (youtube_read or settings.youtube.read_mode) == "poll"
    return {
        "config": policy_config(settings.engagement),
        "overrides": platform_overrides(settings.engagement),
        "youtube_quota": QuotaConfig.from_settings(settings.youtube),
        "youtube_reading": "poll" if poll else "stream",
    }


@dataclass(frozen=True)
class Turn:
    """A turn the router runs that is not simply "answer this message". ``kind``: ``mention``
    when it answers one (``mentions``, declined if the reply budget cannot pay), else ``room``
    (unprompted: paced by the reply budget)."""

    message: ChatMessage
    addressed: tuple[str, ...]
    reply_to_id: str | None
    context: str = ""
    kind: Kind = "room"
    mentions: tuple[ChatMessage, ...] = ()


class LiveChat:
    """The policy's channels in this process, their durable side, and the turns they ask for."""

    def __init__(
        self,
        engagement: Engagement | None = None,
        clock: Callable[[], float] = time.time,
        metrics: MetricsSink | None = None,
        store: LiveStore | None = None,
        budget: ReplyGate | None = None,
        thanks: ThanksConfig | None = None,
    ) -> None:
        self.engagement = engagement or Engagement()
        self.thanks = ThanksChannels(thanks or ThanksConfig())
        self.clock = clock
        self.metrics: MetricsSink = metrics or NullMetrics()
        self.declined = 0  # mentions let go unanswered, with a reason, since start
        self.durable = DurableLedger(self.engagement, store or MemoryLiveStore(), clock)
        self.budget = budget or ReplyGate(clock=clock)
        self.held_back: set[ConversationKey] = set()  # room batches waiting for the budget
        self._store_failing = False
        self._budget_failing = False
        self._prepared: tuple[ChatMessage, ChannelState | None] | None = None

    def applies(self, message: ChatMessage) -> bool:
        return message.ambient or message.platform in LIVE_PLATFORMS

    async def prepare(self, message: ChatMessage) -> None:
        """Before ``observe``: load the channel's durable state when it becomes active here
        (first seen, or quiet for a few seconds); nothing at all for a busy channel."""
        if not self.applies(message):
            return
        conv, now = message.conversation, self.clock()
        state = self.engagement.states.get(conv)
        if self.durable.needs_load(state, now):
            try:
                await until_redis_answers(
                    "load a live channel", lambda: self.durable.load(conv, now)
                )
            except Exception:  # a bug must not stop the chat: the ledger runs on what it knows
                log.exception(
                    "live chat: could not load its state", extra={"conversation": str(conv)}
                )
            state = self.engagement.states.get(conv)
            if state is not None and state.declined:
                self._report_declined(state)
        # ``observe`` of this same message reuses the lookup: a ConversationKey is a pydantic
        # model, and comparing two costs about a microsecond, a few percent of the ingest budget.
        self._prepared = (message, state)

    def observe(self, message: ChatMessage) -> Decision:
        conv, now = message.conversation, self.clock()
        prepared, self._prepared = self._prepared, None
        state = prepared[1] if prepared is not None and prepared[0] is message else None
        if state is None:
            state = self.engagement.state(conv)
        skip = None if message.stream_event is None else self._stream_event(state, message, now)
        if skip is not None:
            return skip
        hold = message.addressed and not self.budget.mentions_open(message.platform)
        decision = observe(state, message, now, hold_mentions=hold)
        state.last_seen = now
        if decision.action is Action.ANSWER_NOW:
            answered = {message.id: now} | {p.message.id: now for p in decision.covered}
            changes = Changes(spoke=now, users={message.author.id: now}, answered=answered)
            self.durable.turn(conv, message.id, changes)
        elif decision.reason is Reason.PAUSE or decision.reason is Reason.RESUME:
            self.durable.paused(conv, state.paused, now)
        if message.addressed and decision.action in (Action.ANSWER_NOW, Action.QUEUE):
            self.budget.count_mention(message.platform)  # the mention rate the budget plans on
        if state.declined:
            self._report_declined(state)
        return decision

    def _stream_event(
        self, state: ChannelState, message: ChatMessage, now: float
    ) -> Decision | None:
        """Keep a stream event for the channel's next thanks (unless paused); then its text, if
        any, goes through the policy like any line (None: observe it)."""
        if state.paused:
            return Decision(Action.IGNORE, Reason.PAUSED)
        if self.thanks.observe(message, now):
            self.metrics.engagement(message.platform, "thanks_event")
        if message.text.strip() and (message.addressed or message.ambient):
            return None
        return Decision(Action.IGNORE, Reason.EMPTY)

    def spoke(self, conversation: ConversationKey) -> None:
        state = self.engagement.states.get(conversation)
        if state is not None:
            mark_spoke(state, self.clock())

    def tick(self) -> list[Turn]:
        """Batches and idle lines that came due, as turns to run. An unprompted turn only while
        the reply budget's room is open (always, where replies are free)."""
        now = self.clock()
        turns: list[Turn] = []
        for conv, state in list(self.engagement.states.items()):
            room = self.budget.room_open(conv.platform, now)
            mentions = self.budget.mentions_open(conv.platform)
            batch = due(state, now, room=room, mentions=mentions)
            if state.declined:
                self._report_declined(state)
            turn, changes = None, Changes(spoke=now)
            if batch is not None:
                turn = batch_turn(conv, batch)
                users = dict.fromkeys(batch.user_ids, now)
                changes = Changes(
                    spoke=now, users=users, answered=dict.fromkeys(batch.message_ids, now)
                )
            elif room and idle_due(state, now):
                turn = idle_turn(conv)
            if turn is not None:
                turns.append(turn)
                self.durable.turn(conv, turn.message.id, changes)
                if turn.kind == "room" and self.budget.covers(conv.platform):
                    self.budget.took_room(now)
            if room:
                self.held_back.discard(conv)
            elif conv not in self.held_back and room_ready(state, now):
                self._held_back(conv, state, "the budget's room is closed")
        for conv, due_now in self.thanks.due(now, lambda conv: self._may_thank(conv, now)):
            turns.append(thanks_turn(conv, due_now))
            self.metrics.engagement(conv.platform, "thanks")
            self.spoke(conv)
            self.durable.turn(conv, turns[-1].message.id, Changes(spoke=now))
            if self.budget.covers(conv.platform):
                self.budget.took_room(now)
        return turns

    def _may_thank(self, conv: ConversationKey, now: float) -> bool | None:
        """Whether a thanks may go out now: not while the channel cools down after the bot spoke
        or the reply budget's room is closed (False: it waits); None: paused (dropped)."""
        state = self.engagement.states.get(conv)
        if state is not None and state.paused:
            return None
        if state is not None and now - state.last_spoke < state.config.channel_cooldown_seconds:
            return False
        return self.budget.room_open(conv.platform, now)

    def save_for(self, message: ChatMessage) -> ChannelSave | None:
        """What the turn of ``message`` decided, as a change of the commit of its reply."""
        return self.durable.save_for(message.conversation, message.id)

    async def maintain(self) -> None:
        """Once a second: save pauses, refresh paused channels, evict idle ones, read the reply
        budget. Never raises; a store that does not answer is tried again on the next call."""
        try:
            await asyncio.wait_for(self.durable.maintain(), MAINTAIN_TIMEOUT)
        except Exception:
            if not self._store_failing:
                log.warning("live chat: could not save or refresh live state", exc_info=True)
            self._store_failing = True
        else:
            if self._store_failing:
                log.info("live chat: live state saved again")
            self._store_failing = False
        try:
            await asyncio.wait_for(self.budget.refresh(), MAINTAIN_TIMEOUT)
        except Exception:
            if not self._budget_failing:  # room turns wait on the last read meanwhile
                log.warning("live chat: could not read the reply budget", exc_info=True)
            self._budget_failing = True
            return
        self._budget_failing = False

    async def pay(
        self, message: ChatMessage, kind: Kind, mentions: tuple[ChatMessage, ...]
    ) -> tuple[bool, str | None]:
        """Before a turn's model runs: reserve its reply's worst-case cost where replies cost.
        ``(True, hold)`` to go on (the reply carries the hold; None where replies are free);
        ``(False, None)``: not paid for -- its mentions are declined ``quota``, a room turn is
        held back (logged and counted here)."""
        if not self.budget.covers(message.platform):
            return True, None
        hold = f"{message.conversation}|{message.id}"
        granted = await until_redis_answers(
            "reserve a reply", lambda: self.budget.reserve(hold, kind)
        )
        if granted:
            return True, hold
        conv = message.conversation
        if kind == "room":
            self._held_back(conv, self.engagement.states.get(conv), "another turn took it")
        for mention in mentions:
            self._decline(mention, "quota")
        if kind == "mention" and not mentions:
            log.info(
                "live chat: turn not paid for: the reply budget is spent",
                extra={"conversation": str(conv), "message_id": message.id},
            )
        return False, None

    def _held_back(self, conv: ConversationKey, state: ChannelState | None, why: str) -> None:
        self.held_back.add(conv)
        self.metrics.engagement(conv.platform, "held_budget")
        budget = self.budget.budget
        log.info(
            "live chat: room batch held back for the reply budget",
            extra={
                "conversation": str(conv),
                "why": why,
                "pending": state.pending_messages if state else 0,
                "room_units": budget.room if budget else None,
                "room_gap_s": round(budget.room_gap, 1) if budget else None,
                "reply_units_left": budget.replies_left if budget else None,
            },
        )

    def _report_declined(self, state: ChannelState) -> None:
        for declined in take_declined(state):
            self._decline(declined.message, declined.reason)

    def _decline(self, message: ChatMessage, reason: str) -> None:
        self.declined += 1
        self.metrics.engagement(message.platform, f"declined_{reason}")
        log.info(
            "live chat: mention declined",
            extra={
                "conversation": str(message.conversation),
                "message_id": message.id,
                "author_id": message.author.id,
                "reason": reason,
            },
        )


def covered_context(decision: Decision) -> str:
    """Lines an immediate answer also covers, for the prompt's context."""
    if decision.action is not Action.ANSWER_NOW or not decision.covered:
        return ""
    lines = [
        prompts.render("live/earlier_line", name=_name(p.message), text=one_line(p.message.text))
        for p in decision.covered
    ]
    return prompts.render("live/earlier_lines", lines="\n".join(lines))


def batch_turn(conv: ConversationKey, batch: Batch) -> Turn:
    """One turn that answers the batch's chatters together, by name: their lines (escaped) are
    the synthetic message, the instructions its context."""
    names = [speaker(c.user_name or c.user_id) for c in batch.chatters]
    lines = [
        prompts.render(
            "live/batch_question_line" if p.question else "live/batch_line",
            name=speaker(c.user_name or c.user_id),
            text=one_line(p.message.text),
        )
        for c in batch.chatters
        for p in c.messages
    ]
    context = ""
    if batch.context:
        others = [
            prompts.render("live/batch_line", name=_name(p.message), text=one_line(p.message.text))
            for p in batch.context
        ]
        context = prompts.render("live/batch_context", lines="\n".join(others))
    text = prompts.render("live/batch_lines", lines="\n".join(lines), context=context)
    last = batch.chatters[-1].messages[-1].message
    mentions = tuple(p.message for c in batch.chatters for p in c.messages if p.addressed)
    return Turn(
        message=_synthetic(conv, f"batch-{last.id}", text),
        addressed=batch.user_ids,
        reply_to_id=last.id,
        kind="mention" if mentions else "room",
        mentions=mentions,
        context=prompts.render("live/batch", names=" and ".join(names)),
    )


def thanks_turn(conv: ConversationKey, due_now: Thanks) -> Turn:
    """An unprompted turn thanking a burst's people by name: what they did and wrote is the
    synthetic message (data), the instruction its context."""
    message = _synthetic(conv, f"thanks-{due_now.last_id}", turn_text(due_now, conv.platform))
    return Turn(message, due_now.user_ids, reply_to_id=None, context=instructions(), kind="room")


def idle_turn(conv: ConversationKey) -> Turn:
    """One self-prompted, on-topic line after a quiet period (the instruction is the context;
    the message only says that nobody wrote)."""
    stamp = int(time.time())
    message = _synthetic(conv, f"idle-{stamp}", prompts.render("live/idle_marker"))
    return Turn(message, addressed=(), reply_to_id=None, context=prompts.render("live/idle"))


def _synthetic(conv: ConversationKey, msg_id: str, text: str) -> ChatMessage:
    return ChatMessage(
        platform=conv.platform,
        id=msg_id[:256],
        conversation=conv,
        author=CHAT_AUTHOR,
        text=text,
        ambient=False,
    )


def _name(message: ChatMessage) -> str:
    return speaker(message.author.display_name or message.author.id)
