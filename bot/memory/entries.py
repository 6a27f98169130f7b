"""Edit or delete one entry of a user's memory by its position: the pure functions behind the
admin dashboard's per-entry buttons, applied through ``MemoryStore.update`` (``WATCH``'d).

Why positions and a check of the text: the dashboard shows a list, and the list may have changed
(the insights worker merged, the user said ``/remember``) between showing it and the click.
Each function takes the text the operator saw and changes nothing unless the entry at that
position still says it, so a stale page never deletes the wrong entry.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from bot.memory.buffers import PIN_TEXT_MAX, REC_TEXT_MAX, UserBuffer, clean_text

Kind = Literal["pin", "rec"]


class StaleEntry(ValueError):
    """The entry at that position is no longer the one the operator saw."""


def _check(buffer: UserBuffer, kind: Kind, index: int, seen: str) -> None:
    entries = buffer.pins if kind == "pin" else buffer.recommendations
    if not 0 <= index < len(entries) or entries[index].text != seen:
        raise StaleEntry(f"{kind} {index} changed since the page was shown; reload and retry")


def delete_entry(buffer: UserBuffer, kind: Kind, index: int, seen: str) -> UserBuffer:
    """``buffer`` without the pin or recommendation at ``index`` (which must read ``seen``)."""
    _check(buffer, kind, index, seen)
    if kind == "pin":
        return buffer.model_copy(update={"pins": buffer.pins[:index] + buffer.pins[index + 1 :]})
    recs = buffer.recommendations
    return buffer.model_copy(update={"recommendations": recs[:index] + recs[index + 1 :]})


def edit_entry(
    buffer: UserBuffer, kind: Kind, index: int, seen: str, text: str, now: datetime
) -> UserBuffer:
    """``buffer`` with the entry at ``index`` reading ``text`` (cleaned; a pin's ``updated_at``
    is ``now`` and it is marked certain: a person set it). Raises ValueError for empty or
    too long text."""
    _check(buffer, kind, index, seen)
    cleaned = clean_text(text)
    limit = PIN_TEXT_MAX if kind == "pin" else REC_TEXT_MAX
    if not cleaned:
        raise ValueError("the new text is empty")
    if len(cleaned) > limit:
        raise ValueError(f"the new text is {len(cleaned)} characters long; at most {limit}")
    if kind == "pin":
        pins = list(buffer.pins)
        pins[index] = pins[index].model_copy(
            update={"text": cleaned, "updated_at": now.replace(microsecond=0), "confidence": 1.0}
        )
        return buffer.model_copy(update={"pins": tuple(pins)})
    recs = list(buffer.recommendations)
    recs[index] = recs[index].model_copy(update={"text": cleaned})
    return buffer.model_copy(update={"recommendations": tuple(recs)})
