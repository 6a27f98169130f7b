"""What ``chorus replay`` found, and the Markdown it prints (the engagement section of
BENCHMARKS.md).

Apart from the simulation (``bot/engagement/replay.py``) because the report is read by more than the
simulation: the CLI prints it and judges it (exit 1 when a mention was lost, a message answered
twice, a platform's send limit exceeded or YouTube's quota overspent or its reading stopped),
the benchmark records it, and the tests check its numbers. The YouTube quota part is
``bot/quota/replay.py``'s ``QuotaReport``.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from bot.engagement.send_limits import SendLimit
from bot.events import ConversationKey
from bot.quota.replay import QuotaReport, format_quota


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
    hold: str | None = None  # the reply budget's hold (YouTube)


@dataclass(frozen=True, slots=True)
class MentionHour:
    """The mentions said in one hour of the trace and how they were answered: in a reply of
    their own (``alone``) or in one that addressed several chatters (``shared``)."""

    hour: int
    mentions: int
    alone: int
    shared: int

    @property
    def answered(self) -> int:
        return self.alone + self.shared


@dataclass(frozen=True, slots=True)
class PlatformSends:
    platform: str
    limit: SendLimit | None  # None: no rate limit, a quota (YouTube)
    sent: int
    peak_in_window: int  # most sends in any window of ``limit.seconds`` on one budget
    peak_per_30s: int  # most sends in any 30 s window on one budget

    @property
    def within_limit(self) -> bool:
        return self.limit is None or self.peak_in_window <= self.limit.messages


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
    mentions_declined: dict[str, int]  # unanswered with a reason (superseded|stale|quota|...)
    mention_latencies: tuple[float, ...]  # simulated seconds from message to answer, sorted
    questions_total: int  # unaddressed questions queued in the ledger
    questions_answered: int
    chatters_addressed: int
    ignored: dict[str, int]
    dropped: dict[str, int]  # queued but never answered: stale | overflow | superseded | ...
    commands: dict[str, int]
    double_answers: int  # messages answered by more than one reply; must be 0
    sends: tuple[PlatformSends, ...]
    malformed: tuple[Malformed, ...]
    quota: QuotaReport | None = None  # YouTube's quota over the trace, when it had YouTube chat
    mentions_by_hour: tuple[MentionHour, ...] = ()

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

    @property
    def within_quota(self) -> bool:
        """YouTube's day not overspent and its reading never stopped (True without YouTube)."""
        return self.quota is None or self.quota.ok

    @property
    def ok(self) -> bool:
        """The verdict of ``chorus replay``."""
        lost = self.mentions_lost or self.double_answers
        return not lost and self.within_send_limits and self.within_quota

    @property
    def answer_rate(self) -> float | None:
        return self.mentions_answered / self.mentions_total if self.mentions_total else None

    def latency(self, quantile: float) -> float | None:
        """Nearest-rank quantile of the mention latencies (None when there were none)."""
        values = self.mention_latencies
        if not values:
            return None
        return values[max(0, math.ceil(quantile * len(values)) - 1)]


def peak(times: list[float], seconds: float) -> int:
    """Most timestamps in any half-open window ``(end - seconds, end]`` (times are sorted)."""
    best = start = 0
    for end, at in enumerate(times):
        while times[start] + seconds <= at:
            start += 1
        best = max(best, end - start + 1)
    return best


def format_hours(report: ReplayReport) -> list[str]:
    """Per hour of the trace: mentions said and answered (alone, shared), and YouTube's reads
    and the units left for them at the hour's end."""
    q = report.quota
    reads = "polls" if q is not None and q.reading == "poll" else "stream connections"
    lines = [
        f"| hour | mentions | answered alone | in a shared reply | addressed | {reads} "
        "| units left at its end (reading until the reset needs) |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in report.mentions_by_hour:
        spent = q.hours[row.hour] if q is not None and row.hour < len(q.hours) else None
        share = f"{100 * row.answered / row.mentions:.0f}%" if row.mentions else "-"
        left = f"{spent.left:,} ({spent.reading_needs:,})" if spent else "-"
        lines.append(
            f"| {row.hour + 1} | {row.mentions} | {row.alone} | {row.shared} | {share} "
            f"| {spent.reads if spent else '-'} | {left} |"
        )
    return lines


def format_report(report: ReplayReport) -> str:
    """The report as Markdown tables (the engagement section of BENCHMARKS.md)."""

    def pct(part: int, whole: int) -> str:
        return f"{part} / {whole}" + (f" ({100 * part / whole:.0f}%)" if whole else "")

    kinds = Counter(r.kind for r in report.replies)
    p50, p90, worst = (report.latency(q) for q in (0.5, 0.9, 1.0))
    latency = "n/a" if p50 is None else f"p50 {p50:.1f} s, p90 {p90:.1f} s, max {worst:.1f} s"
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
        if s.limit is None:
            lines.append(
                f"| {s.platform} | daily quota (below) | {s.sent} | - | {s.peak_per_30s} "
                f"| {'yes' if report.within_quota else 'NO'} |"
            )
            continue
        scope = "per channel" if s.limit.per_channel else "per account"
        lines.append(
            f"| {s.platform} | {s.limit.messages} / {s.limit.seconds:g} s {scope} | {s.sent} "
            f"| {s.peak_in_window} | {s.peak_per_30s} (limit {s.limit.per_30s:g}) "
            f"| {'yes' if s.within_limit else 'NO'} |"
        )
    if report.quota is not None:
        lines += ["", *format_quota(report.quota), "", *format_hours(report)]
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
            "`!chorus pause`, *flood* = a flooder's queued ambient lines, *budget* = a room "
            "batch the reply budget could not pay for after all.",
        ]
    for m in report.malformed[:10]:
        lines.append(f"\nline {m.line}: {m.error}")
    return "\n".join(lines)
