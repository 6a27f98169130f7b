"""Offline replay of a chat trace through the engagement policy (``chorus replay TRACE.jsonl``).

Tuning thresholds against a live stream is slow and public; a replay runs hours of recorded or
synthetic chat through the real policy (``bot/live/engagement.py``) in simulated time - no waiting,
no network, no model - and reports what the bot would have done: how often it spoke, how fast it
answered mentions, whom it addressed, what it ignored and why, and its peak send rate against
each platform's budget. The numbers in BENCHMARKS.md come from ``format_report`` on the shipped
trace ``bench/traces/busy_chat.jsonl``.

The simulation mirrors the router: every message goes through ``observe``; a timer ticks every
``tick_seconds`` and asks each channel ``due``/``idle_due``; a scripted "model" answers after
``model_latency_seconds`` with a line that names the chatters it addresses (and the router's
acknowledgement for pause/resume); each send passes a sliding-window limiter with the platform's
budget (a send over budget waits, as in the adapters' chokepoints) and then ``mark_spoke``.

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
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.live import engagement as policy
from bot.live.engagement import Action, Engagement, PolicyConfig, Reason
from bot.live.send_limits import SendLimit

_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Malformed:
    line: int
    error: str


@dataclass(frozen=True, slots=True)
class SentReply:
    """One message the bot sent in the simulation."""

    t: float
    conversation: ConversationKey
    kind: str  # addressed | batch | idle | command
    text: str
    message_ids: tuple[str, ...]
    user_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PlatformSends:
    platform: str
    limit: SendLimit
    sent: int
    peak_in_window: int  # most sends in any window of ``limit.seconds`` on one budget
    peak_per_30s: int  # most sends in any 30 s window on one budget

    @property
    def within_limit(self) -> bool:
        return self.peak_in_window <= self.limit.messages


@dataclass(frozen=True, slots=True)
class ReplayReport:
    trace: str
    messages: int
    duration_seconds: float
    channels: int
    chatters: int
    replies: tuple[SentReply, ...]
    mentions_total: int  # addressed messages the policy accepted (not ignored)
    mentions_while_paused: int  # addressed messages ignored because the channel was paused
    mentions_answered: int
    mentions_declined: dict[str, int]  # unanswered with a reason (superseded|stale|overflow|...)
    mention_latencies: tuple[float, ...]  # simulated seconds from message to answer, sorted
    questions_total: int  # unaddressed questions queued in the ledger
    questions_answered: int
    chatters_addressed: int
    ignored: dict[str, int]
    dropped: dict[str, int]  # queued but never answered: stale | overflow | superseded | paused
    commands: dict[str, int]
    double_answers: int  # messages answered by more than one reply; must be 0
    sends: tuple[PlatformSends, ...]
    malformed: tuple[Malformed, ...]

    @property
    def mentions_lost(self) -> int:
        """Accepted mentions neither answered nor declined with a reason; must be 0."""
        return self.mentions_total - self.mentions_answered - sum(self.mentions_declined.values())

    @property
    def replies_sent(self) -> int:
        return len(self.replies)

    @property
    def reply_rate(self) -> float:
        return self.replies_sent / self.messages if self.messages else 0.0

    @property
    def within_send_limits(self) -> bool:
        return all(s.within_limit for s in self.sends)

    def latency(self, quantile: float) -> float | None:
        """Nearest-rank quantile of the mention latencies (None when there were none)."""
        values = self.mention_latencies
        if not values:
            return None
        return values[max(0, math.ceil(quantile * len(values)) - 1)]


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
) -> ReplayReport:
    """Replay trace lines through the policy in simulated time and report what happened."""
    events, malformed = _parse(lines)
    sim = _Simulation(
        Engagement(config, overrides),
        dict(send_limits or {}),
        bot_is_moderator=bot_is_moderator,
        latency=model_latency_seconds,
        tick=tick_seconds,
    )
    for t, message in events:
        sim.advance(t)
        sim.observe(message, t)
    if events:
        # Run on until every channel settles: its ledger goes stale, its idle line is due.
        horizon = max(
            max(s.config.stale_after_seconds, s.config.idle_prompt_after_seconds or 0.0)
            for s in sim.engagement.states.values()
        )
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
        sent_at=_EPOCH + timedelta(seconds=float(t)),
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
    ) -> None:
        if tick <= 0 or latency < 0:
            raise ValueError("tick_seconds must be > 0 and model_latency_seconds >= 0")
        self.engagement = engagement
        self.send_limits = send_limits
        self.bot_is_moderator = bot_is_moderator
        self.latency = latency
        self.tick = tick
        self.next_tick: float | None = None
        self.outbox: list[tuple[float, int, SentReply]] = []  # heap by ready time
        self.seq = 0
        self.windows: dict[tuple[str, str], deque[float]] = {}
        self.send_times: dict[tuple[str, str], list[float]] = {}
        self.sent: list[SentReply] = []
        self.decisions: Counter[tuple[Action, Reason]] = Counter()
        self.mentions: dict[str, float] = {}  # message id -> t, accepted addressed messages
        self.mentions_paused = 0
        self.declined: dict[str, str] = {}  # message id -> reason, mentions let go unanswered
        self.questions: set[str] = set()

    def limit(self, platform: str) -> SendLimit:
        found = self.send_limits.get(platform)
        return found or policy.send_limit(platform, bot_is_moderator=self.bot_is_moderator)

    def observe(self, message: ChatMessage, t: float) -> None:
        state = self.engagement.state(message.conversation)
        decision = policy.observe(state, message, t)
        self._take_declined(state)
        self.decisions[decision.action, decision.reason] += 1
        if message.addressed and decision.action in (Action.ANSWER_NOW, Action.QUEUE):
            self.mentions[message.id] = t
        elif message.addressed and decision.reason is Reason.PAUSED:
            self.mentions_paused += 1
        if decision.reason is Reason.QUESTION:
            self.questions.add(message.id)
        if decision.action is Action.ANSWER_NOW:
            name = message.author.display_name
            ids = (message.id, *(p.message.id for p in decision.covered))
            text = f"@{name} here is my answer to: {message.text[:60]}"
            self.schedule(t, message.conversation, "addressed", text, ids, (message.author.id,))
        elif decision.action is Action.COMMAND:
            text = "Paused." if decision.reason is Reason.PAUSE else "Back."
            self.schedule(t, message.conversation, "command", text, (), ())

    def schedule(
        self,
        t: float,
        key: ConversationKey,
        kind: str,
        text: str,
        ids: tuple[str, ...],
        users: tuple[str, ...],
    ) -> None:
        self.seq += 1
        reply = SentReply(t + self.latency, key, kind, text, ids, users)
        heapq.heappush(self.outbox, (reply.t, self.seq, reply))

    def advance(self, until: float) -> None:
        """Run timer ticks and sends due up to ``until`` (inclusive), in time order."""
        if self.next_tick is None:
            self.next_tick = math.floor(until / self.tick) * self.tick
        while True:
            send_at = self.outbox[0][0] if self.outbox else math.inf
            if min(self.next_tick, send_at) > until:
                return
            if send_at <= self.next_tick:
                self._send(heapq.heappop(self.outbox)[2])
            else:
                self._tick(self.next_tick)
                self.next_tick += self.tick

    def flush(self) -> None:
        while self.outbox:
            self._send(heapq.heappop(self.outbox)[2])

    def _tick(self, now: float) -> None:
        for key, state in self.engagement.states.items():
            batch = policy.due(state, now)
            self._take_declined(state)
            if batch is not None:
                names = " ".join(f"@{c.user_name}" for c in batch.chatters)
                text = f"{names} thanks for chatting! ({len(batch.message_ids)} messages)"
                self.schedule(now, key, "batch", text, batch.message_ids, batch.user_ids)
            if policy.idle_due(state, now):
                self.schedule(now, key, "idle", "So, what is everyone up to?", (), ())

    def _take_declined(self, state: policy.ChannelState) -> None:
        for declined in policy.take_declined(state):
            self.declined[declined.message.id] = declined.reason

    def _send(self, reply: SentReply) -> None:
        key = reply.conversation
        limit = self.limit(key.platform)
        budget = (key.platform, key.channel if limit.per_channel else "*")
        window = self.windows.setdefault(budget, deque())
        while window and window[0] + limit.seconds <= reply.t:
            window.popleft()
        if len(window) >= limit.messages:  # over budget: wait, like the adapter's chokepoint
            self.seq += 1
            later = replace(reply, t=window[0] + limit.seconds)
            heapq.heappush(self.outbox, (later.t, self.seq, later))
            return
        window.append(reply.t)
        self.send_times.setdefault(budget, []).append(reply.t)
        self.sent.append(reply)
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
        dropped: Counter[str] = Counter()
        for state in self.engagement.states.values():
            dropped.update(state.dropped)
        ignored = {r.value: n for (a, r), n in self.decisions.items() if a is Action.IGNORE}
        commands = {r.value: n for (a, r), n in self.decisions.items() if a is Action.COMMAND}
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
            mentions_declined=dict(sorted(Counter(self.declined.values()).items())),
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
        )

    def _platform_sends(self) -> tuple[PlatformSends, ...]:
        rows: dict[str, PlatformSends] = {}
        for (platform, _), times in sorted(self.send_times.items()):
            limit = self.limit(platform)
            previous = rows.get(platform)
            row = PlatformSends(
                platform,
                limit,
                len(times) + (previous.sent if previous else 0),
                max(_peak(times, limit.seconds), previous.peak_in_window if previous else 0),
                max(_peak(times, 30.0), previous.peak_per_30s if previous else 0),
            )
            rows[platform] = row
        return tuple(rows.values())


def _peak(times: list[float], seconds: float) -> int:
    """Most timestamps in any half-open window ``(end - seconds, end]`` (times are sorted)."""
    best = start = 0
    for end, at in enumerate(times):
        while times[start] + seconds <= at:
            start += 1
        best = max(best, end - start + 1)
    return best


def format_report(report: ReplayReport) -> str:
    """The report as Markdown tables (the engagement section of BENCHMARKS.md)."""

    def pct(part: int, whole: int) -> str:
        return f"{part} / {whole}" + (f" ({100 * part / whole:.0f}%)" if whole else "")

    kinds = Counter(r.kind for r in report.replies)
    p50, p95, worst = (report.latency(q) for q in (0.5, 0.95, 1.0))
    latency = "n/a" if p50 is None else f"p50 {p50:.1f} s, p95 {p95:.1f} s, max {worst:.1f} s"
    paused = report.mentions_while_paused
    lines = [
        f"### Engagement replay: `{report.trace}`",
        "",
        "| metric | value |",
        "|---|---|",
        f"| messages | {report.messages:,} from {report.chatters} chatters in "
        f"{report.channels} channels over {report.duration_seconds / 60:.0f} simulated minutes |",
        f"| replies sent | {report.replies_sent} ({100 * report.reply_rate:.1f}% of messages): "
        + ", ".join(f"{n} {kind}" for kind, n in sorted(kinds.items()))
        + " |",
        f"| mentions answered | {pct(report.mentions_answered, report.mentions_total)}"
        + (f"; {paused} more arrived while paused (ignored by design)" if paused else "")
        + " |",
        "| mentions declined with a reason | "
        + (", ".join(f"{n} {r}" for r, n in report.mentions_declined.items()) or "0")
        + f" |\n| mentions lost (neither answered nor declined) | {report.mentions_lost} |",
        f"| time to answer a mention (simulated) | {latency} |",
        f"| questions answered | {pct(report.questions_answered, report.questions_total)} |",
        f"| chatters addressed (distinct) | {report.chatters_addressed} |",
        f"| messages answered twice | {report.double_answers} |",
        f"| malformed lines skipped | {len(report.malformed)} |",
        "",
        "| platform | budget | sent | peak in budget window | peak per 30 s | within |",
        "|---|---|---|---|---|---|",
    ]
    for s in report.sends:
        scope = "per channel" if s.limit.per_channel else "per account"
        lines.append(
            f"| {s.platform} | {s.limit.messages} / {s.limit.seconds:g} s {scope} | {s.sent} "
            f"| {s.peak_in_window} | {s.peak_per_30s} (limit {s.limit.per_30s:g}) "
            f"| {'yes' if s.within_limit else 'NO'} |"
        )
    lines += ["", "| not answered | reason | messages |", "|---|---|---|"]
    lines += [f"| ignored | {reason} | {n} |" for reason, n in report.ignored.items()]
    lines += [
        f"| dropped from the ledger | {reason} | {n} |" for reason, n in report.dropped.items()
    ]
    if report.dropped:
        lines += [
            "",
            "Dropped from the ledger: *superseded* = an older line of a chatter who kept talking "
            "(each chatter's newest lines are kept), *stale* = waited past "
            "`stale_after_seconds`, *overflow* = ledger full, *paused* = cleared by "
            "`!chorus pause`, *flood* = a flooder's queued ambient lines.",
        ]
    for m in report.malformed[:10]:
        lines.append(f"\nline {m.line}: {m.error}")
    return "\n".join(lines)
