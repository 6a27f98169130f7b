"""Offline replay of a chat trace through the engagement policy (``chorus replay TRACE.jsonl``).

Tuning thresholds against a live stream is slow and public; a replay runs hours of recorded or
synthetic chat through the real policy (``bot/engagement/policy.py``) in simulated time - no waiting,
no network, no model - and reports what the bot would have done: how often it spoke, how fast it
answered mentions (answer rate, p50/p90/max), whom it addressed, what it ignored, dropped or
declined and why, its peak send rate against each platform's send limit, and YouTube's quota
(``bot/quota/replay.py``: the same reply budget the deployment runs). The numbers in
BENCHMARKS.md come from ``format_report`` (``bot/engagement/replay_report.py``) on the shipped traces.

The simulation mirrors the router: every message goes through ``observe`` (a polled YouTube chat
only sees it at the next planned poll); a timer ticks every ``tick_seconds``, reads the reply
budget and asks each channel ``due``/``idle_due`` (an unprompted turn only while the budget's
room is open); a YouTube turn reserves its cost as the router does (a mention it cannot pay for
is declined ``quota``); a scripted "model" answers after ``model_latency_seconds`` with a line
that names the chatters it addresses (and the router's acknowledgement for pause/resume); each
send passes a sliding-window limiter with the platform's send limit (a send over it waits, as in
the adapters' chokepoints; YouTube has none, it pays quota per piece) and then ``mark_spoke``.

Trace format, one JSON object per line: ``t`` (seconds from the start), ``platform``,
``channel``, ``user_id``, ``user_name``, ``text``, and optionally ``roles`` (``["moderator"]``),
``mentions_bot``, ``reply_to_bot``, ``is_direct``, ``is_bot``, ``id``. A malformed line is
reported with its number and skipped.
"""

from __future__ import annotations

import heapq
import json
import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.engagement import policy
from bot.engagement.policy import Action, Engagement, PolicyConfig, Reason
from bot.engagement.replay_report import (
    Malformed,
    MentionHour,
    PlatformSends,
    ReplayReport,
    SentReply,
    format_report,
    peak,
)
from bot.engagement.send_limits import SendLimit
from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.quota.plan import Kind, QuotaConfig, Reading
from bot.quota.replay import START, QuotaSim

__all__ = ["ReplayReport", "SentReply", "format_report", "replay", "replay_lines"]


def replay(trace_path: str | Path, **options: Any) -> ReplayReport:
    """Replay the JSONL trace at ``trace_path``; ``options`` as for ``replay_lines``."""
    path = Path(trace_path)
    with path.open(encoding="utf-8") as lines:
        return replay_lines(lines, name=path.name, **options)


def replay_lines(
    lines: Iterable[str],
    *,
    name: str = "<trace>",
    config: PolicyConfig | None = None,
    overrides: Mapping[str, PolicyConfig] | None = None,
    send_limits: Mapping[str, SendLimit] | None = None,
    bot_is_moderator: bool = False,
    model_latency_seconds: float = 1.5,
    tick_seconds: float = 1.0,
    youtube_quota: QuotaConfig | None = None,
    youtube_reading: Reading = "stream",
) -> ReplayReport:
    """Replay trace lines through the policy in simulated time and report what happened.
    YouTube chat is paid from ``youtube_quota`` (default: the default quota settings), read by
    ``youtube_reading`` (``stream``, or ``poll`` on the planned cadence)."""
    events, malformed = _parse(lines)
    quota = None
    if any(m.platform == "youtube" for _, m in events):
        quota = QuotaSim(youtube_quota or QuotaConfig(), reading=youtube_reading)
        quota.begin()
    sim = _Simulation(
        Engagement(config, overrides),
        dict(send_limits or {}),
        bot_is_moderator=bot_is_moderator,
        latency=model_latency_seconds,
        tick=tick_seconds,
        quota=quota,
    )
    for t, message in events:
        sim.advance(t)
        sim.arrive(message, t)
    if events:
        # Run on until every channel settles: its ledger goes stale, its idle line is due.
        configs = [s.config for s in sim.engagement.states.values()]
        horizon = max(
            max(c.stale_after_seconds, c.idle_prompt_after_seconds or 0.0)
            for c in configs or [sim.engagement.default, *sim.engagement.overrides.values()]
        )
        if quota is not None and quota.next_poll is not None:
            horizon += quota.config.poll_floor_seconds  # the last lines wait for a poll
        sim.advance(events[-1][0] + horizon + model_latency_seconds + tick_seconds)
    sim.flush()
    return sim.report(name, events, malformed)


def _parse(lines: Iterable[str]) -> tuple[list[tuple[float, ChatMessage]], list[Malformed]]:
    events: list[tuple[float, ChatMessage]] = []
    malformed: list[Malformed] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            events.append(_to_message(json.loads(line), number))
        except (ValueError, TypeError, KeyError, ValidationError) as exc:
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            malformed.append(Malformed(number, f"{type(exc).__name__}: {first}"))
    events.sort(key=lambda event: event[0])  # stable: lines with equal t keep their order
    return events, malformed


def _to_message(obj: Any, number: int) -> tuple[float, ChatMessage]:
    if not isinstance(obj, dict):
        raise TypeError("a trace line must be a JSON object")
    t = obj["t"]
    if isinstance(t, bool) or not isinstance(t, int | float) or not math.isfinite(t) or t < 0:
        raise ValueError(f"t must be a finite number of seconds >= 0, got {t!r}")
    if not isinstance(obj["text"], str):
        raise TypeError("text must be a string")
    user_id = str(obj["user_id"])
    author = Author(
        id=user_id,
        display_name=str(obj.get("user_name") or user_id),
        roles=frozenset(Role(role) for role in obj.get("roles") or ()),
        is_bot=bool(obj.get("is_bot", False)),
    )
    mentions, reply_to_bot, direct = (
        bool(obj.get(k, False)) for k in ("mentions_bot", "reply_to_bot", "is_direct")
    )
    message = ChatMessage(
        platform=obj["platform"],
        id=str(obj.get("id") or f"line-{number}"),
        conversation=ConversationKey(platform=obj["platform"], channel=str(obj["channel"])),
        author=author,
        text=obj["text"],
        sent_at=START + timedelta(seconds=float(t)),
        mentions_bot=mentions,
        reply_to_bot=reply_to_bot,
        is_direct=direct,
        ambient=not (mentions or reply_to_bot or direct),
    )
    return float(t), message


class _Simulation:
    def __init__(
        self,
        engagement: Engagement,
        send_limits: dict[str, SendLimit],
        *,
        bot_is_moderator: bool,
        latency: float,
        tick: float,
        quota: QuotaSim | None = None,
    ) -> None:
        if tick <= 0 or latency < 0:
            raise ValueError("tick_seconds must be > 0 and model_latency_seconds >= 0")
        self.engagement = engagement
        self.send_limits = send_limits
        self.bot_is_moderator = bot_is_moderator
        self.latency = latency
        self.tick = tick
        self.quota = quota
        self.next_tick: float | None = None
        self.outbox: list[tuple[float, int, SentReply]] = []  # heap by ready time
        self.inbox: deque[tuple[float, ChatMessage]] = deque()  # waiting for the next poll
        self.seq = 0
        self.windows: dict[tuple[str, str], deque[float]] = {}
        self.send_times: dict[tuple[str, str], list[float]] = {}
        self.sent: list[SentReply] = []
        self.decisions: Counter[tuple[Action, Reason]] = Counter()
        self.mentions: dict[str, float] = {}  # message id -> t, accepted addressed messages
        self.mentions_paused = 0
        self.declined: dict[str, str] = {}  # message id -> reason, mentions let go unanswered
        self.dropped: Counter[str] = Counter()  # dropped here, not by the ledger
        self.questions: set[str] = set()
        self.end = 0.0

    def limit(self, platform: str) -> SendLimit | None:
        found = self.send_limits.get(platform)
        return found or policy.send_limit(platform, bot_is_moderator=self.bot_is_moderator)

    def arrive(self, message: ChatMessage, t: float) -> None:
        """A message said at ``t``: seen now, or at the next poll of a polled YouTube chat."""
        quota = self.quota
        if quota is not None and quota.covers(message.platform) and quota.next_poll is not None:
            self.inbox.append((t, message))
        else:
            self.observe(message, t, t)

    def observe(self, message: ChatMessage, now: float, said: float) -> None:
        state = self.engagement.state(message.conversation)
        quota = self.quota
        hold = quota is not None and quota.covers(message.platform) and not quota.mentions_open()
        decision = policy.observe(state, message, now, hold_mentions=hold)
        self._take_declined(state)
        self.decisions[decision.action, decision.reason] += 1
        if message.addressed and decision.action in (Action.ANSWER_NOW, Action.QUEUE):
            self.mentions[message.id] = said
            if self.quota is not None and self.quota.covers(message.platform):
                self.quota.gate.count_mention(message.platform)
        elif message.addressed and decision.reason is Reason.PAUSED:
            self.mentions_paused += 1
        if decision.reason is Reason.QUESTION:
            self.questions.add(message.id)
        if decision.action is Action.ANSWER_NOW:
            name = message.author.display_name
            ids = (message.id, *(p.message.id for p in decision.covered))
            mentions = (message.id, *(p.message.id for p in decision.covered if p.addressed))
            text = f"@{name} here is my answer to: {message.text[:60]}"
            users = (message.author.id,)
            self.schedule(now, message.conversation, "addressed", text, ids, users, mentions)
        elif decision.action is Action.COMMAND:
            text = "Paused." if decision.reason is Reason.PAUSE else "Back."
            self.schedule(now, message.conversation, "command", text, (), (), (), message.id)

    def schedule(
        self,
        t: float,
        key: ConversationKey,
        kind: str,
        text: str,
        ids: tuple[str, ...],
        users: tuple[str, ...],
        mentions: tuple[str, ...],
        turn_id: str = "",
    ) -> None:
        """A turn decided at ``t``: its reply goes out after the model's latency. Where replies
        cost quota it first reserves them, as the router does; refused, its mentions are
        declined ``quota`` (a room turn: its lines are dropped ``budget``)."""
        hold = None
        if self.quota is not None and self.quota.covers(key.platform):
            budget: Kind = "mention" if mentions or kind == "command" else "room"
            hold = f"{key}|{turn_id or (ids[-1] if ids else f'{kind}-{t}')}"
            if not self.quota.reserve(hold, budget, t):
                self.declined.update(dict.fromkeys(mentions, "quota"))
                if budget == "room":
                    self.dropped["budget"] += len(ids)
                return
        self.seq += 1
        reply = SentReply(t + self.latency, key, kind, text, ids, users, hold)
        heapq.heappush(self.outbox, (reply.t, self.seq, reply))

    def advance(self, until: float) -> None:
        """Run polls, timer ticks and sends due up to ``until`` (inclusive), in time order."""
        if self.next_tick is None:
            self.next_tick = math.floor(until / self.tick) * self.tick
        while True:
            send_at = self.outbox[0][0] if self.outbox else math.inf
            poll_at = self._poll_at()
            first = min(self.next_tick, send_at, poll_at)
            if first > until:
                self.end = max(self.end, until)
                return
            if poll_at == first:
                self._poll(poll_at)
            elif send_at == first:
                self._send(heapq.heappop(self.outbox)[2])
            else:
                self._tick(self.next_tick)
                self.next_tick += self.tick

    def flush(self) -> None:
        while self.outbox:
            self._send(heapq.heappop(self.outbox)[2])

    def _poll_at(self) -> float:
        quota = self.quota
        return math.inf if quota is None or quota.next_poll is None else quota.next_poll

    def _poll(self, now: float) -> None:
        """A poll of the YouTube chat: what was said since reaches the policy now."""
        assert self.quota is not None
        self.quota.poll(now)
        while self.inbox and self.inbox[0][0] <= now:
            said, message = self.inbox.popleft()
            self.observe(message, now, said)

    def _tick(self, now: float) -> None:
        quota = self.quota
        if quota is not None:
            quota.refresh(now)
        for key, state in self.engagement.states.items():
            budgeted = quota is not None and quota.covers(key.platform)
            room = quota.room_open(now) if quota is not None and budgeted else True
            paced = quota.mentions_open() if quota is not None and budgeted else True
            batch = policy.due(state, now, room=room, mentions=paced)
            self._take_declined(state)
            if batch is not None:
                names = " ".join(f"@{c.user_name}" for c in batch.chatters)
                text = f"{names} thanks for chatting! ({len(batch.message_ids)} messages)"
                mentions = tuple(
                    p.message.id for c in batch.chatters for p in c.messages if p.addressed
                )
                if quota is not None and budgeted and not mentions:
                    quota.decided("room", now)
                turn = f"batch-{batch.message_ids[-1]}"
                ids, users = batch.message_ids, batch.user_ids
                self.schedule(now, key, "batch", text, ids, users, mentions, turn)
            if room and policy.idle_due(state, now):
                if quota is not None and budgeted:
                    quota.decided("room", now)
                text = "So, what is everyone up to?"
                self.schedule(now, key, "idle", text, (), (), (), f"idle-{now}")
            if quota is not None and budgeted:
                ready = policy.room_ready(state, now)
                quota.held_back(key, now, room=room, ready=ready)

    def _take_declined(self, state: policy.ChannelState) -> None:
        for declined in policy.take_declined(state):
            self.declined[declined.message.id] = declined.reason

    def _send(self, reply: SentReply) -> None:
        key = reply.conversation
        limit = self.limit(key.platform)
        budget = (key.platform, key.channel if limit and limit.per_channel else "*")
        window = self.windows.setdefault(budget, deque())
        if limit is not None:
            while window and window[0] + limit.seconds <= reply.t:
                window.popleft()
            if len(window) >= limit.messages:  # over the limit: wait, like the chokepoint
                self.seq += 1
                later = replace(reply, t=window[0] + limit.seconds)
                heapq.heappush(self.outbox, (later.t, self.seq, later))
                return
            window.append(reply.t)
        if self.quota is not None and self.quota.covers(key.platform):
            self.quota.send(reply.hold, reply.text, reply.t)
        self.send_times.setdefault(budget, []).append(reply.t)
        self.sent.append(reply)
        self.end = max(self.end, reply.t)
        policy.mark_spoke(self.engagement.state(key), reply.t)

    def report(
        self, name: str, events: list[tuple[float, ChatMessage]], malformed: list[Malformed]
    ) -> ReplayReport:
        answered: Counter[str] = Counter()
        first_answer: dict[str, float] = {}
        for reply in self.sent:
            for message_id in reply.message_ids:
                answered[message_id] += 1
                first_answer.setdefault(message_id, reply.t)
        latencies = sorted(first_answer[i] - t for i, t in self.mentions.items() if i in answered)
        dropped: Counter[str] = Counter(self.dropped)
        for state in self.engagement.states.values():
            dropped.update(state.dropped)
        ignored = {r.value: n for (a, r), n in self.decisions.items() if a is Action.IGNORE}
        commands = {r.value: n for (a, r), n in self.decisions.items() if a is Action.COMMAND}
        declined = {i: r for i, r in self.declined.items() if i in self.mentions}
        return ReplayReport(
            trace=name,
            messages=len(events),
            duration_seconds=events[-1][0] - events[0][0] if events else 0.0,
            channels=len(self.engagement.states),
            chatters=len({m.author.id for _, m in events}),
            replies=tuple(self.sent),
            mentions_total=len(self.mentions),
            mentions_while_paused=self.mentions_paused,
            mentions_answered=len(latencies),
            mentions_declined=dict(sorted(Counter(declined.values()).items())),
            mention_latencies=tuple(latencies),
            questions_total=len(self.questions),
            questions_answered=sum(1 for i in self.questions if i in answered),
            chatters_addressed=len({u for reply in self.sent for u in reply.user_ids}),
            ignored=dict(sorted(ignored.items(), key=lambda kv: (-kv[1], kv[0]))),
            dropped=dict(sorted(dropped.items())),
            commands=dict(sorted(commands.items())),
            double_answers=sum(1 for n in answered.values() if n > 1),
            sends=self._platform_sends(),
            malformed=tuple(malformed),
            quota=self.quota.report(self.end) if self.quota is not None else None,
            mentions_by_hour=self._by_hour(),
        )

    def _by_hour(self) -> tuple[MentionHour, ...]:
        """Mentions per hour said, answered alone or in a reply to several chatters."""
        shared: dict[str, bool] = {}
        for reply in self.sent:
            for message_id in reply.message_ids:
                if message_id in self.mentions:
                    shared.setdefault(message_id, len(set(reply.user_ids)) > 1)
        hours = math.ceil(max(self.mentions.values(), default=0.0) / 3600 + 1e-9)
        rows = []
        for hour in range(hours):
            said = [i for i, t in self.mentions.items() if hour * 3600 <= t < (hour + 1) * 3600]
            together = sum(1 for i in said if shared.get(i) is True)
            alone = sum(1 for i in said if shared.get(i) is False)
            rows.append(MentionHour(hour, len(said), alone, together))
        return tuple(rows)

    def _platform_sends(self) -> tuple[PlatformSends, ...]:
        rows: dict[str, PlatformSends] = {}
        for (platform, _), times in sorted(self.send_times.items()):
            limit = self.limit(platform)
            previous = rows.get(platform)
            window = limit.seconds if limit else 30.0
            rows[platform] = PlatformSends(
                platform,
                limit,
                len(times) + (previous.sent if previous else 0),
                max(peak(times, window), previous.peak_in_window if previous else 0),
                max(peak(times, 30.0), previous.peak_per_30s if previous else 0),
            )
        return tuple(rows.values())
