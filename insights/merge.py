"""Merging an analysis into a user's buffer: add, update, replace or leave alone.

The rules, applied in the order the model proposed them:

* ``add`` -- a new pin; if it restates an existing pin (near-duplicate), that pin is refreshed
  with the newer wording instead of a second copy appearing.
* ``update`` -- refines the target pin in place (it keeps its creation time).
* ``replace`` -- a contradiction: the target (older) pin gives way to the new one. The new text
  is validated first, so a bad replacement leaves the old pin; the two are never both lost.
* ``keep`` -- nothing changes.
* A proposal below ``MIN_CONFIDENCE``, with an empty or over-long text, is dropped.
* Targets are numbers of the pins *shown to the model*; the merge runs on the buffer as stored
  at write time (a ``/remember`` may have landed meanwhile), so each target is found again by
  value. A target that is gone or already used turns ``update``/``replace`` into ``add``.
* Caps then evict the weakest pins (lowest confidence, then least recently updated) and the
  oldest recommendations.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from bot.memory.buffers import MemorySettings, Pin, UserBuffer
from bot.memory.edit import Outcome, add_pin, add_recommendation, replace_pin, update_pin
from insights.analyse import ProposedPin, ProposedRec

MIN_CONFIDENCE = 0.5


@dataclass
class MergeReport:
    added: int = 0
    updated: int = 0
    replaced: int = 0
    kept: int = 0
    dropped: int = 0
    recommendations: int = 0
    reasons: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.replaced or self.recommendations)


def merge(
    buffer: UserBuffer,
    pins: Sequence[ProposedPin],
    recs: Sequence[ProposedRec],
    *,
    shown: Sequence[Pin],
    now: datetime,
    settings: MemorySettings,
    min_confidence: float = MIN_CONFIDENCE,
) -> tuple[UserBuffer, MergeReport]:
    """``buffer`` with the proposals applied, and what happened to each."""
    report = MergeReport()
    used: set[int] = set()
    for proposal in pins:
        if proposal.op == "keep":
            report.kept += 1
            continue
        if proposal.confidence < min_confidence:
            report.dropped += 1
            report.reasons.append("low confidence")
            continue
        target = _find_target(buffer, proposal.target, shown, used)
        try:
            if proposal.op in ("update", "replace") and target is not None:
                used.add(proposal.target or 0)
                if proposal.op == "update":
                    buffer = update_pin(
                        buffer,
                        target,
                        proposal.text,
                        source_message_id=proposal.message_id,
                        confidence=proposal.confidence,
                        now=now,
                    )
                    report.updated += 1
                else:
                    buffer = replace_pin(
                        buffer,
                        target,
                        proposal.text,
                        source_message_id=proposal.message_id,
                        confidence=proposal.confidence,
                        now=now,
                        max_pins=settings.pins_max,
                    )
                    report.replaced += 1
                continue
            buffer, outcome = add_pin(
                buffer,
                proposal.text,
                source_message_id=proposal.message_id,
                confidence=proposal.confidence,
                now=now,
                max_pins=settings.pins_max,
            )
        except ValueError as exc:
            report.dropped += 1
            report.reasons.append(str(exc))
            continue
        if outcome is Outcome.ADDED:
            report.added += 1
        elif outcome is Outcome.UPDATED:
            report.updated += 1
        else:
            report.kept += 1
    for rec in recs:
        try:
            buffer, outcome = add_recommendation(
                buffer, rec.text, tool=rec.tool, now=now, max_recs=settings.recs_max
            )
        except ValueError as exc:
            report.dropped += 1
            report.reasons.append(str(exc))
            continue
        report.recommendations += 1
    return buffer, report


def _find_target(
    buffer: UserBuffer, number: int | None, shown: Sequence[Pin], used: set[int]
) -> int | None:
    """The index in ``buffer`` of shown pin ``number`` (1-based), if it is still there."""
    if number is None or not 1 <= number <= len(shown) or number in used:
        return None
    try:
        return buffer.pins.index(shown[number - 1])
    except ValueError:
        return None
