"""Editing a user's buffer: pure functions shared by every writer.

``/remember``, ``/timezone`` and the insights merge all change buffers through these, so the
rules hold whoever writes: text is cleaned and bounded, a near-duplicate refreshes the pin it
restates (the newer wording wins) instead of adding a copy, a replacement is validated before
the pin it replaces is dropped, and the caps evict the weakest entries.

``/pins`` numbers the entries pins first, then recommendations (``numbered``); ``/forget <n>``
deletes by the entry's fingerprint (``entry_print``) rather than by its position, so an insights
write landing between the two can shift the numbers but never make ``/forget`` delete another
entry. ``/link`` joins two buffers with ``merge_buffers``: the same duplicate rule, then the caps;
``/unlink`` and ``/forget`` on a linked person split its buffer by origin with ``part``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from datetime import datetime
from enum import StrEnum

from bot.memory.buffers import (
    DUPLICATE_SIMILARITY,
    PIN_TEXT_MAX,
    REC_TEXT_MAX,
    TOOL_MAX,
    Pin,
    Recommendation,
    UserBuffer,
    cap,
    clean_text,
    source_ref,
    whole_seconds,
)
from bot.memory.relevance import jaccard, terms


class Outcome(StrEnum):
    ADDED = "added"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


def find_duplicate(pins: Sequence[Pin], text: str) -> int | None:
    """The index of a pin saying (nearly) the same as ``text``, if any."""
    wanted = _normal(text)
    wanted_terms = terms(text)
    for index, pin in enumerate(pins):
        if _normal(pin.text) == wanted:
            return index
        pin_terms = terms(pin.text)
        if wanted_terms and pin_terms and jaccard(wanted_terms, pin_terms) >= DUPLICATE_SIMILARITY:
            return index
    return None


def add_pin(
    buffer: UserBuffer,
    text: str,
    *,
    source_message_id: str,
    confidence: float,
    now: datetime,
    max_pins: int,
) -> tuple[UserBuffer, Outcome]:
    """Add a pin, or refresh the near-duplicate it restates (the newer wording wins)."""
    text = _checked(text, PIN_TEXT_MAX, "pin")
    pins = list(buffer.pins)
    index = find_duplicate(pins, text)
    if index is not None:
        old = pins[index]
        if _normal(old.text) == _normal(text) and confidence <= old.confidence:
            return buffer, Outcome.UNCHANGED
        same = _normal(old.text) == _normal(text)
        pins[index] = old.model_copy(
            update={
                "text": text,
                "source": source_ref(source_message_id),
                "confidence": max(confidence, old.confidence) if same else confidence,
                "updated_at": whole_seconds(now),
            }
        )
        return buffer.model_copy(update={"pins": tuple(pins)}), Outcome.UPDATED
    pins.append(
        Pin(
            text=text,
            source=source_ref(source_message_id),
            confidence=confidence,
            created_at=now,
            updated_at=now,
        )
    )
    return cap(buffer.model_copy(update={"pins": tuple(pins)}), max_pins, None), Outcome.ADDED


def update_pin(
    buffer: UserBuffer,
    index: int,
    text: str,
    *,
    source_message_id: str,
    confidence: float,
    now: datetime,
) -> UserBuffer:
    """Refine pin ``index`` in place (it keeps its creation time)."""
    text = _checked(text, PIN_TEXT_MAX, "pin")
    pins = list(buffer.pins)
    pins[index] = pins[index].model_copy(
        update={
            "text": text,
            "source": source_ref(source_message_id),
            "confidence": confidence,
            "updated_at": whole_seconds(now),
        }
    )
    return buffer.model_copy(update={"pins": tuple(pins)})


def replace_pin(
    buffer: UserBuffer,
    index: int,
    text: str,
    *,
    source_message_id: str,
    confidence: float,
    now: datetime,
    max_pins: int,
) -> UserBuffer:
    """A contradiction: pin ``index`` gives way to a new pin. The new text is checked first,
    so a bad replacement leaves the old pin alone: both are never lost."""
    text = _checked(text, PIN_TEXT_MAX, "pin")
    pins = buffer.pins[:index] + buffer.pins[index + 1 :]
    rest = buffer.model_copy(update={"pins": pins})
    replaced, _ = add_pin(
        rest,
        text,
        source_message_id=source_message_id,
        confidence=confidence,
        now=now,
        max_pins=max_pins,
    )
    return replaced


def add_recommendation(
    buffer: UserBuffer, text: str, *, tool: str | None, now: datetime, max_recs: int
) -> tuple[UserBuffer, Outcome]:
    """Add a recommendation; a near-duplicate (same tool) is refreshed instead."""
    text = _checked(text, REC_TEXT_MAX, "recommendation")
    if tool is not None and not 0 < len(tool) <= TOOL_MAX:
        tool = None
    recs = list(buffer.recommendations)
    index = _same_recommendation(recs, text, tool)
    if index is not None:
        del recs[index]
        recs.append(Recommendation(text=text, tool=tool, created_at=now))
        return buffer.model_copy(update={"recommendations": tuple(recs)}), Outcome.UPDATED
    recs.append(Recommendation(text=text, tool=tool, created_at=now))
    capped = cap(buffer.model_copy(update={"recommendations": tuple(recs)}), None, max_recs)
    return capped, Outcome.ADDED


Entry = Pin | Recommendation


def numbered(buffer: UserBuffer) -> list[Entry]:
    """The entries in the order ``/pins`` numbers them (from 1): pins, then recommendations."""
    return [*buffer.pins, *buffer.recommendations]


def entry_print(entry: Entry) -> str:
    """A short fingerprint of one entry as stored (kind, text, tool, creation time): a refined
    or replaced entry gets a new one."""
    if isinstance(entry, Pin):
        parts = ["p", entry.text, "", str(int(entry.created_at.timestamp()))]
    else:
        parts = ["r", entry.text, entry.tool or "", str(int(entry.created_at.timestamp()))]
    return hashlib.blake2b("\x1f".join(parts).encode(), digest_size=6).hexdigest()


def remove_entry(buffer: UserBuffer, fingerprint: str) -> UserBuffer | None:
    """``buffer`` without the entry whose ``entry_print`` is ``fingerprint``; None if none is."""
    pins = tuple(p for p in buffer.pins if entry_print(p) != fingerprint)
    recs = tuple(r for r in buffer.recommendations if entry_print(r) != fingerprint)
    if len(pins) == len(buffer.pins) and len(recs) == len(buffer.recommendations):
        return None
    return buffer.model_copy(update={"pins": pins, "recommendations": recs})


def merge_buffers(
    first: UserBuffer, second: UserBuffer, *, max_pins: int, max_recs: int
) -> UserBuffer:
    """``first`` (its identity kept) with ``second``'s entries joined: a near-duplicate pin
    keeps the stronger copy (higher confidence, then the later update), a near-duplicate
    recommendation (same tool) the newer one; then the caps. The timezone is ``first``'s if
    it has one."""
    pins = list(first.pins)
    for pin in second.pins:
        index = find_duplicate(pins, pin.text)
        if index is None:
            pins.append(pin)
        elif (pin.confidence, pin.updated_at) > (pins[index].confidence, pins[index].updated_at):
            pins[index] = pin
    recs = list(first.recommendations)
    for rec in second.recommendations:
        index = _same_recommendation(recs, rec.text, rec.tool)
        if index is None:
            recs.append(rec)
        elif rec.created_at > recs[index].created_at:
            recs[index] = rec
    recs.sort(key=lambda r: r.created_at)  # the caps drop the oldest first
    zone = first if first.timezone else second
    merged = first.model_copy(
        update={
            "pins": tuple(pins),
            "recommendations": tuple(recs),
            "timezone": zone.timezone,
            "timezone_origin": zone.timezone_origin,
        }
    )
    return cap(merged, max_pins, max_recs)


def part(buffer: UserBuffer, origins: Collection[str], *, own: bool = False) -> UserBuffer:
    """The entries and timezone of ``buffer`` that came from one of ``origins`` (an entry with
    no origin from none); ``own``: for one identity's own buffer, where the origin is implied
    and not kept."""

    def mine(origin: str | None) -> bool:
        return origin is not None and origin in origins

    gone = {"origin": None} if own else {}
    pins = tuple(p.model_copy(update=gone) for p in buffer.pins if mine(p.origin))
    recs = tuple(r.model_copy(update=gone) for r in buffer.recommendations if mine(r.origin))
    zone = buffer.timezone if mine(buffer.timezone_origin) else None
    kept_zone = None if own or zone is None else buffer.timezone_origin
    update = {"pins": pins, "recommendations": recs, "timezone": zone, "timezone_origin": kept_zone}
    return buffer.model_copy(update=update)


def stamp_own(buffer: UserBuffer, origin: str) -> UserBuffer:
    """An identity's own buffer with its implied origin written out (``origin``), before it
    joins a person's buffer."""
    pins = tuple(p if p.origin else p.model_copy(update={"origin": origin}) for p in buffer.pins)
    recs = tuple(
        r if r.origin else r.model_copy(update={"origin": origin}) for r in buffer.recommendations
    )
    zone = buffer.timezone_origin or (origin if buffer.timezone else None)
    update = {"pins": pins, "recommendations": recs, "timezone_origin": zone}
    return buffer.model_copy(update=update)


def _same_recommendation(recs: Sequence[Recommendation], text: str, tool: str | None) -> int | None:
    for index, rec in enumerate(recs):
        if rec.tool == tool and (
            _normal(rec.text) == _normal(text)
            or jaccard(terms(rec.text), terms(text)) >= DUPLICATE_SIMILARITY
        ):
            return index
    return None


def _checked(text: str, limit: int, what: str) -> str:
    text = clean_text(text)
    if not text:
        raise ValueError(f"a {what} needs some text")
    if len(text) > limit:
        raise ValueError(f"a {what} is at most {limit} characters, got {len(text)}")
    return text


def _normal(text: str) -> str:
    return " ".join("".join(ch for ch in text.casefold() if ch.isalnum() or ch.isspace()).split())
