"""Where each entry of a linked person's memory came from, as stored.

In a linked person's buffer (``/link``: bot/memory/people.py) every pin, recommendation and the
timezone carry the identity they came from (``keys.identity_member``), so ``/unlink`` gives each
side back what came from it and ``/forget`` takes only the asker's part (``stamp`` here and
``bot.memory.buffers.stamped`` mark them; ``bot.memory.edit.part`` splits by them). In an
identity's own buffer the origin is the identity itself and is not stored.

Why apart from the rows: the buffer's rows keep their shape (``o``: the origins once each,
``po``/``ro``: an index into ``o`` per pin and per recommendation, ``zo``: the timezone's; -1:
none). A buffer without origins -- every one written before origins existed -- reads as before
(every origin None), and an older reader, which ignores fields it does not know, still reads
the rows. The cost is a few bytes per entry (an index), not the identity's name per entry.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

Entry = TypeVar("Entry", bound=BaseModel)


def stamp(before: Sequence[Entry], after: Sequence[Entry], origin: str) -> tuple[Entry, ...]:
    """``after``, each entry not found as it was in ``before`` marked as coming from
    ``origin`` (it was added or changed by that identity)."""
    kept = set(before)
    return tuple(e if e in kept else e.model_copy(update={"origin": origin}) for e in after)


def dump(
    pins: Sequence[str | None], recs: Sequence[str | None], zone: str | None
) -> dict[str, Any]:
    """The fields that store these origins (none when every origin is None)."""
    origins = sorted({o for o in (*pins, *recs, zone) if o})
    if not origins:
        return {}
    index = {o: n for n, o in enumerate(origins)}
    return {
        "o": origins,
        "po": [index.get(o or "", -1) for o in pins],
        "ro": [index.get(o or "", -1) for o in recs],
        "zo": index.get(zone or "", -1),
    }


class Loaded:
    """The origins stored in a decoded buffer's ``data``; anything unreadable is None."""

    def __init__(self, data: dict[str, Any]) -> None:
        names = data.get("o")
        self._names = (
            [n if isinstance(n, str) else None for n in names] if isinstance(names, list) else []
        )
        self._data = data

    def _name(self, at: object) -> str | None:
        if isinstance(at, int) and 0 <= at < len(self._names):
            return self._names[at]
        return None

    def row(self, field: str, n: int) -> str | None:
        """The origin of row ``n`` of ``p`` (``field`` ``po``) or ``r`` (``ro``)."""
        found = self._data.get(field)
        return self._name(found[n]) if isinstance(found, list) and n < len(found) else None

    def zone(self) -> str | None:
        return self._name(self._data.get("zo"))
