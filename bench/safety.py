"""Moderation benchmark: how much ordinary chat the default lists flag, how much of a written
corpus of abuse and injection attempts they catch, and what a check costs per message.

Ordinary chat is the shipped busy traces (``bench/traces/*.jsonl``, 12,073 lines) plus
``tests/fixtures/safety/ordinary.txt`` (lines that trip naive filters: Scunthorpe, Niger,
"don't kill yourself over it"). The abusive corpus is ``tests/fixtures/safety/abusive.jsonl``:
each line says under which preset it must be caught and by which rule. ``tests/
test_safety_corpus.py`` holds the same figures to their bounds (at most 1% of ordinary chat
flagged; every abusive line caught as documented); ``python -m bench.safety`` prints them.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from bot.events import Author, ChatMessage, ConversationKey
from bot.plugins.builtin.moderation import ALL_FILTERS
from bot.plugins.builtin.moderation.filters import Thresholds, fingerprint, text_filter
from bot.safety.gate import SafetyGate
from bot.safety.policy import Policies, SafetyPolicy
from bot.settings import SafetySettings

ROOT = Path(__file__).resolve().parent.parent
TRACES = sorted((ROOT / "bench" / "traces").glob("*.jsonl"))
ORDINARY = ROOT / "tests" / "fixtures" / "safety" / "ordinary.txt"
ABUSIVE = ROOT / "tests" / "fixtures" / "safety" / "abusive.jsonl"
LIVE = ConversationKey(platform="twitch", channel="bench")


def policy(preset: str) -> SafetyPolicy:
    return Policies(SafetySettings(preset=preset)).safety_for(LIVE)  # type: ignore[arg-type]


def ordinary_lines() -> list[str]:
    lines = [json.loads(row)["text"] for path in TRACES for row in path.read_text().splitlines()]
    extra = ORDINARY.read_text(encoding="utf-8").splitlines()
    return lines + [line for line in extra if line.strip() and not line.startswith("#")]


@dataclass
class Rate:
    flagged: int = 0
    total: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.flagged / self.total if self.total else 0.0


def flag_rate(lines: list[str], preset: str) -> Rate:
    """How many of ``lines`` the preset flags (inbound), and by which rule."""
    rules, rate = policy(preset), Rate(total=len(lines))
    for line in lines:
        flag = rules.screen(line)
        if flag is not None:
            rate.flagged += 1
            rate.rules[flag.rule] += 1
            if len(rate.examples) < 5:
                rate.examples.append(line[:60])
    return rate


@dataclass(frozen=True)
class Attempt:
    preset: str
    caught: str
    text: str


def abusive() -> list[Attempt]:
    rows = ABUSIVE.read_text(encoding="utf-8").splitlines()
    return [Attempt(**json.loads(row)) for row in rows if row.strip()]


def caught(attempts: list[Attempt]) -> dict[str, tuple[int, int, list[str]]]:
    """Per documented rule: (caught by that rule, attempts, the texts that were not)."""
    policies = {name: policy(name) for name in ("standard", "streamer")}
    found: dict[str, tuple[int, int, list[str]]] = {}
    for attempt in attempts:
        flag = policies[attempt.preset].screen(attempt.text)
        hit = flag is not None and flag.rule == attempt.caught
        ok, total, missed = found.get(attempt.caught, (0, 0, []))
        found[attempt.caught] = (ok + hit, total + 1, missed + ([] if hit else [attempt.text]))
    return found


def per_message_us(lines: list[str], preset: str, rounds: int = 3) -> float:
    rules = policy(preset)
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for line in lines:
            rules.screen(line)
        best = min(best, (time.perf_counter() - started) / len(lines))
    return best * 1e6


def gate_per_message_us(lines: list[str], rounds: int = 3) -> float:
    """What dispatch pays per live-chat message for the whole gate (``SafetyGate.screen``: the
    author's name remembered, their block entry looked up, the standard policy's checks)."""
    gate = SafetyGate(Policies())
    messages = [
        ChatMessage(
            platform="twitch",
            id=f"m{n}",
            conversation=LIVE,
            author=Author(id=f"u{n % 500}", display_name=f"viewer{n % 500}"),
            text=line,
            ambient=True,
        )
        for n, line in enumerate(lines)
    ]
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for message in messages:
            gate.screen(message)
        best = min(best, (time.perf_counter() - started) / len(messages))
    return best * 1e6


def spam_filters(lines: list[str], rounds: int = 3) -> tuple[float, Counter[str]]:
    """The ``moderation`` plugin's text filters at their defaults over ``lines``: the cost per
    message (every filter, plus the fingerprint repeats and copypasta are counted by; their
    store round trips are not included) and how many lines each would act on."""
    enabled, limits = frozenset(ALL_FILTERS), Thresholds()
    tripped: Counter[str] = Counter(
        rule for line in lines if (rule := text_filter(line, enabled, limits)) is not None
    )
    best = float("inf")
    for _ in range(rounds):
        started = time.perf_counter()
        for line in lines:
            text_filter(line, enabled, limits)
            fingerprint(line)
        best = min(best, (time.perf_counter() - started) / len(lines))
    return best * 1e6, tripped


def main() -> list[str]:
    lines = ordinary_lines()
    out = ["## Moderation: ordinary chat and an abuse corpus", ""]
    out += ["| corpus | preset | flagged | share | by rule |", "|---|---|---|---|---|"]
    for preset in ("standard", "streamer"):
        rate = flag_rate(lines, preset)
        rules = ", ".join(f"{k} {v}" for k, v in rate.rules.most_common()) or "-"
        out.append(
            f"| ordinary ({rate.total:,} lines) | {preset} | {rate.flagged} | "
            f"{rate.share:.2%} | {rules} |"
        )
    attempts = abusive()
    for rule, (ok, total, _) in sorted(caught(attempts).items()):
        presets = sorted({a.preset for a in attempts if a.caught == rule})
        out.append(f"| abusive: {rule} | {'/'.join(presets)} | {ok} of {total} | - | {rule} |")
    out += [
        "",
        f"One check (`SafetyPolicy.screen`, ordinary lines): "
        f"{per_message_us(lines, 'standard'):.1f} us standard, "
        f"{per_message_us(lines, 'streamer'):.1f} us streamer, per message, one core; the "
        f"whole gate at dispatch (`SafetyGate.screen`): {gate_per_message_us(lines):.1f} us.",
    ]
    cost, tripped = spam_filters(lines)
    acted = ", ".join(f"{k} {v}" for k, v in tripped.most_common()) or "none"
    out += [
        "",
        f"The `moderation` plugin's spam filters (links, caps, symbols, emotes, zalgo and the "
        f"repeat/copypasta fingerprint, defaults): {cost:.1f} us per message, one core; on the "
        f"ordinary lines they would act on {sum(tripped.values())} of {len(lines):,} "
        f"({sum(tripped.values()) / len(lines):.2%}: {acted}).",
    ]
    return out


if __name__ == "__main__":
    print("\n".join(main()))
