"""Per-user memory: pins (what a user told us about themselves) and recommendations (how to
help them best), kept in Redis for CHORUS_MEMORY_TTL after their last activity.

A user is ``platform`` + the platform's user id, never a display name. Everything a user has
lives in one compact JSON string (``keys.memory``) so the reply path reads it with one ``GET``
inside the router's read pipeline, and so it stays small: at the default caps (20 pins, 10
recommendations) and the longest entries allowed, the value is about 3.5 KB and ``MEMORY
USAGE`` stays under 4 KB. Entry lengths are bounded for that reason (``bot.settings.memory``),
and ``fit`` evicts the weakest entries if multi-byte text would push a buffer past its byte
budget anyway.

Writes are read-modify-write under ``WATCH`` (the insights worker, ``/remember`` and
``/timezone`` may race), so no update is lost and no Lua is needed; the edits themselves are the
pure functions of ``bot.memory.edit``.

In a linked person's buffer every entry and the timezone carry the identity they came from
(``origin``; bot/memory/origins.py says how it is stored): ``update`` stamps what it adds or
changes with the identity writing (``/remember`` on that account, the insights job of that
account's lines), and ``/link`` stamps each side's entries when it merges them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import unicodedata
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from bot.events import AwareDatetime, ConversationKey, utcnow
from bot.memory import origins
from bot.settings.memory import (
    INSIGHTS_MODELS,
    PIN_TEXT_MAX,
    REC_TEXT_MAX,
    SOURCE_MAX,
    TIMEZONE_MAX,
    TOOL_MAX,
    MemorySettings,
)
from bot.state import keys
from bot.state.connect import Client
from bot.state.people import PeopleStore
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import Activity, TurnChanges, TurnState

__all__ = [
    "INSIGHTS_MODELS",
    "PIN_TEXT_MAX",
    "REC_TEXT_MAX",
    "SOURCE_MAX",
    "TIMEZONE_MAX",
    "TOOL_MAX",
    "MemorySettings",
    "MemoryStore",
    "Pin",
    "Recommendation",
    "UserBuffer",
]

log = logging.getLogger("chorus.memory")

# Two notes whose term sets overlap this much say the same thing; the newer wording wins.
DUPLICATE_SIMILARITY = 0.8
CONVERSATIONS_MAX = 1000


# -- text hygiene ------------------------------------------------------------------------------
def clean_text(text: str) -> str:
    """One line of printable text: control, format and private-use characters removed (they
    could hide instructions or reorder text), whitespace collapsed."""
    kept = [
        " " if ch.isspace() else ch
        for ch in text
        if ch.isspace() or ch == "\u200d" or unicodedata.category(ch) not in _HIDDEN
    ]
    return " ".join("".join(kept).split())


# Control, format (bidi overrides, tag characters), surrogate and private-use characters.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co"})


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, at a word boundary when one is near, with ``…``."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def source_ref(message_id: str) -> str:
    """A message id as stored in a pin: itself when short, else a stable 20-character digest.

    Long ids (YouTube's are ~100 characters) would eat the 4 KB budget; a digest still lets a
    deleted message's pins be found (``Pin.came_from``).
    """
    plain = message_id.isascii() and message_id.isprintable() and not message_id.startswith("~")
    if plain and len(message_id) <= SOURCE_MAX and not set(message_id) & set('"\\'):
        return message_id
    digest = hashlib.blake2b(message_id.encode(), digest_size=14).digest()
    return "~" + base64.urlsafe_b64encode(digest).decode().rstrip("=")


def whole_seconds(value: datetime) -> datetime:
    return value.replace(microsecond=0)


Timestamp = Annotated[AwareDatetime, AfterValidator(whole_seconds)]
Confidence = Annotated[float, Field(ge=0, le=1), AfterValidator(lambda value: round(value, 2))]


# -- models ------------------------------------------------------------------------------------
class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Pin(_Frozen):
    """A fact about a user, learnt from one of that user's own messages."""

    text: str = Field(min_length=1, max_length=PIN_TEXT_MAX)
    source: str = Field(max_length=SOURCE_MAX, description="source_ref of the message")
    confidence: Confidence
    created_at: Timestamp
    updated_at: Timestamp
    origin: str | None = None  # the identity it came from, in a linked person's buffer

    def came_from(self, message_id: str) -> bool:
        return self.source == source_ref(message_id)


class Recommendation(_Frozen):
    """Advice to the assistant on how to help this user (optionally about one tool)."""

    text: str = Field(min_length=1, max_length=REC_TEXT_MAX)
    tool: str | None = Field(default=None, min_length=1, max_length=TOOL_MAX)
    created_at: Timestamp
    origin: str | None = None  # the identity it came from, in a linked person's buffer


class UserBuffer(_Frozen):
    """Everything remembered about one user."""

    platform: str
    user_id: str
    pins: tuple[Pin, ...] = ()
    recommendations: tuple[Recommendation, ...] = ()
    timezone: str | None = Field(default=None, max_length=TIMEZONE_MAX)
    timezone_origin: str | None = None

    @property
    def is_empty(self) -> bool:
        return not self.pins and not self.recommendations and self.timezone is None


def stamped(before: UserBuffer, after: UserBuffer, origin: str) -> UserBuffer:
    """``after`` with every entry (and the timezone) not in ``before`` as it was marked as
    coming from ``origin``: the identity that added or changed it."""
    pins = origins.stamp(before.pins, after.pins, origin)
    recs = origins.stamp(before.recommendations, after.recommendations, origin)
    zone = (after.timezone, after.timezone_origin) != (before.timezone, before.timezone_origin)
    zone_origin = origin if zone and after.timezone else after.timezone_origin
    update = {"pins": pins, "recommendations": recs, "timezone_origin": zone_origin}
    return after.model_copy(update=update)


# -- caps ------------------------------------------------------------------------------------
def fit(buffer: UserBuffer, settings: MemorySettings) -> UserBuffer:
    """``buffer`` within the caps and the byte budget, evicting the weakest entries."""
    buffer = cap(buffer, settings.pins_max, settings.recs_max)
    while len(encode(buffer).encode()) > settings.max_bytes and not buffer.is_empty:
        pins, recs = len(buffer.pins), len(buffer.recommendations)
        # Keep the two lists in proportion to their caps: evict from the fuller one.
        if recs and recs * settings.pins_max >= pins * max(settings.recs_max, 1):
            buffer = buffer.model_copy(update={"recommendations": buffer.recommendations[1:]})
        elif pins:
            buffer = cap(buffer, len(buffer.pins) - 1, None)
        else:
            buffer = buffer.model_copy(update={"timezone": None})
    return buffer


def cap(buffer: UserBuffer, max_pins: int | None, max_recs: int | None) -> UserBuffer:
    """Evict beyond the caps: the weakest pins (lowest confidence, then least recently
    updated) and the oldest recommendations. ``None`` leaves that list alone."""
    pins = list(buffer.pins)
    while max_pins is not None and len(pins) > max_pins:
        weakest = min(
            range(len(pins)),
            key=lambda i: (pins[i].confidence, pins[i].updated_at, pins[i].created_at),
        )
        del pins[weakest]
    recs = buffer.recommendations
    if max_recs is not None and len(recs) > max_recs:
        recs = recs[len(recs) - max_recs :] if max_recs else ()
    return buffer.model_copy(update={"pins": tuple(pins), "recommendations": recs})


# -- encoding ----------------------------------------------------------------------------------
def encode(buffer: UserBuffer) -> str:
    """Compact JSON: rows instead of objects, epoch seconds, confidence in percent."""
    data: dict[str, Any] = {"v": 1}
    if buffer.timezone:
        data["z"] = buffer.timezone
    data["p"] = [
        [
            p.text,
            p.source,
            round(p.confidence * 100),
            int(p.created_at.timestamp()),
            int(p.updated_at.timestamp()),
        ]
        for p in buffer.pins
    ]
    data["r"] = [[r.text, r.tool, int(r.created_at.timestamp())] for r in buffer.recommendations]
    zone = buffer.timezone_origin if buffer.timezone else None
    pin_origins = [p.origin for p in buffer.pins]
    data |= origins.dump(pin_origins, [r.origin for r in buffer.recommendations], zone)
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def decode(raw: str | None, *, platform: str, user_id: str) -> UserBuffer:
    """The buffer stored as ``raw``; unreadable rows are skipped and logged, never fatal."""
    empty = UserBuffer(platform=platform, user_id=user_id)
    if not raw:
        return empty
    try:
        data = json.loads(raw)
        if not isinstance(data, dict) or data.get("v") != 1:
            raise ValueError(f"unknown buffer format {str(raw)[:20]!r}")
    except ValueError:
        log.warning("unreadable memory buffer ignored", extra={"platform": platform}, exc_info=True)
        return empty
    pins, recs = [], []
    origin = origins.Loaded(data)
    for n, row in enumerate(_rows(data, "p")):
        try:
            text, source, percent, created, updated = row
            pins.append(
                Pin(
                    text=text,
                    source=source,
                    confidence=percent / 100,
                    created_at=_from_epoch(created),
                    updated_at=_from_epoch(updated),
                    origin=origin.row("po", n),
                )
            )
        except (ValueError, TypeError):
            log.warning("skipping unreadable pin", extra={"platform": platform}, exc_info=True)
    for n, row in enumerate(_rows(data, "r")):
        try:
            text, tool, created = row
            at = _from_epoch(created)
            recs.append(
                Recommendation(text=text, tool=tool, created_at=at, origin=origin.row("ro", n))
            )
        except (ValueError, TypeError):
            log.warning(
                "skipping unreadable recommendation", extra={"platform": platform}, exc_info=True
            )
    zone = data.get("z")
    return UserBuffer(
        platform=platform,
        user_id=user_id,
        pins=tuple(pins),
        recommendations=tuple(recs),
        timezone=zone if isinstance(zone, str) and len(zone) <= TIMEZONE_MAX else None,
        timezone_origin=origin.zone(),
    )


def _rows(data: dict[str, Any], name: str) -> list[Any]:
    rows = data.get(name, [])
    return rows if isinstance(rows, list) else []


def _from_epoch(seconds: int) -> datetime:
    return datetime.fromtimestamp(int(seconds), UTC)


# -- the store ---------------------------------------------------------------------------------
class MemoryStore:
    """User buffers over any store client (a Redis server or the embedded store); the keys and
    transactions are ``bot.state.people``'s, the rules of a buffer this module's.

    The reply path reads a buffer inside the turn's one read (``bot.state.turn.TurnQuery``:
    ``decode`` parses what it found) and records activity as a change of the turn's commit
    (``activity``).
    """

    def __init__(self, redis: Client, settings: MemorySettings | None = None) -> None:
        self.redis = redis
        self.store = PeopleStore(redis)
        self.settings = settings or MemorySettings()

    # reading
    @property
    def refresh_seconds(self) -> int:
        """How long a linked identity's link is kept alive by a read on the reply path
        (``TurnQuery.memory_refresh``): the memory's own TTL."""
        return self.settings.ttl_seconds

    def from_read(self, state: TurnState, *, platform: str, user_id: str) -> UserBuffer:
        """The buffer a turn's read found (``TurnQuery.memory_refresh`` set), labelled with the
        identity asking, whoever's key holds it."""
        return decode(state.memory, platform=platform, user_id=user_id)

    async def load(self, platform: str, user_id: str) -> UserBuffer:
        """One user's buffer (their linked person's, if linked), in one round trip. The
        buffer is labelled with the identity asking, whoever's key holds it."""
        _, raw = await self.store.load(platform, user_id)
        return decode(raw, platform=platform, user_id=user_id)

    async def conversations(self, platform: str, user_id: str) -> list[ConversationKey]:
        """The conversations the user spoke in lately (most recent first)."""
        found = []
        for text in await self.store.conversations(platform, user_id):
            try:
                found.append(ConversationKey.parse(text))
            except ValueError:
                log.warning("skipping unreadable conversation key", exc_info=True)
        return found

    # writing
    async def save(self, buffer: UserBuffer) -> UserBuffer:
        """Store ``buffer`` (fitted to the caps) in one round trip; returns what was stored.
        Unconditional: use ``update`` when another writer may be at work."""
        fitted = fit(buffer, self.settings)
        value = "" if fitted.is_empty else encode(fitted)
        await self.store.save(buffer.platform, buffer.user_id, value, self.settings.ttl_seconds)
        return fitted

    async def update(
        self,
        platform: str,
        user_id: str,
        change: Callable[[UserBuffer], UserBuffer | None],
        *,
        unless_forgotten_since: datetime | None = None,
    ) -> UserBuffer | None:
        """Apply ``change`` to the stored buffer atomically (``WATCH``, retried on a race).

        ``change`` returns the new buffer, or None to leave it alone. With
        ``unless_forgotten_since``, nothing is written when the user said ``/forget`` after
        that moment, and None is returned: an analysis of forgotten lines never writes back.
        """
        result: list[UserBuffer] = []

        def edit(raw: str | None, person: str | None) -> str | None:
            result.clear()
            current = decode(raw, platform=platform, user_id=user_id)
            changed = change(current)
            if changed is None or changed == current:
                result.append(current)
                return None
            if (changed.platform, changed.user_id) != (platform, user_id):
                raise ValueError("a change must not move a buffer to another user")
            if person is not None:  # a person's: what this identity changed is its own
                changed = stamped(current, changed, keys.identity_member(platform, user_id))
            fitted = fit(changed, self.settings)
            result.append(fitted)
            return "" if fitted.is_empty else encode(fitted)

        since = None if unless_forgotten_since is None else _ms(unless_forgotten_since)
        done = await self.store.update(
            platform,
            user_id,
            edit,
            ttl_seconds=self.settings.ttl_seconds,
            unless_forgotten_since_ms=since,
        )
        return result[0] if done and result else None

    def activity(
        self,
        platform: str,
        user_id: str,
        conversation: ConversationKey,
        *,
        now: datetime | None = None,
    ) -> Activity:
        """The user's activity, as a change of the turn's commit: their buffer lives another
        TTL (never created by this; a linked identity's link is refreshed by its read instead)
        and ``conversation`` joins their recent conversations, pruned to the window and
        capped."""
        return Activity(
            platform,
            user_id,
            conversation,
            now or utcnow(),
            memory_ttl=self.settings.ttl_seconds,
            window_seconds=self.settings.conversation_window,
            max_conversations=CONVERSATIONS_MAX,
        )

    async def touch(
        self,
        platform: str,
        user_id: str,
        conversation: ConversationKey,
        *,
        now: datetime | None = None,
    ) -> None:
        """``activity``, written now (outside a turn)."""
        changes = TurnChanges(activity=self.activity(platform, user_id, conversation, now=now))
        await RedisTurnStore(self.redis).write(changes)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
