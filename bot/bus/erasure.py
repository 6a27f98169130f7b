"""``/forget``'s reach into the Redis Streams bus: a user's entries still held there are deleted.

Why: a stream keeps an entry after it is acked (until ``MAXLEN`` or the retention window,
``bot.bus.retention``, trims it), and an entry is the full JSON of a message or a reply. Erasing
the memory and the history alone left the user's words readable with ``XRANGE`` for up to a day.

What is the user's (identity is the platform plus the platform user id, never a name):

- ``inbound``: the ``ChatMessage`` entries they wrote (``platform`` and ``author.id``);
- ``deletions``: ``MessageDeleted`` events naming them (``author_id``) or one of the messages
  found above (``message_id``);
- ``outbound:<platform>``: ``Reply`` entries addressed to them (their id in
  ``addressed_user_ids``; a live-chat reply addressed to several people is erased too: it
  answers their words);
- ``dead_letters``: ``DeadLetter`` entries wrapping a message they wrote;
- ``moderation:<platform>``: ``ModerationRequest`` entries acting on them (``user_id``).

Each stream is read in pages (``XRANGE ... COUNT``) and the matches of a page are removed with
one ``XDEL``, across every partition; nobody else's entry is touched. Three kinds of the user's
entries are left in place, for the consumers' sake; retention removes them within the window:

- **Unread work.** An entry some consumer group has not read yet (its id is above the group's
  last-delivered id) would otherwise vanish unanswered or unsent. An entry a consumer already
  read, acked or not, is deleted: the consumer holds its own copy, and ``XACK`` of a deleted id
  still clears it from the pending list (tests/test_bus_erasure.py). Only if that consumer dies
  before acking does the redelivery find the entry gone, and it is logged as lost and acked.
- **The ``/forget`` message itself** (``request``): the router acks it after the reply.
- **What the user wrote after it**: inbound entries newer than the ``/forget`` entry are kept,
  so a message sent right after ``/forget`` is still answered even if a worker dies. In the
  other partitions "newer" is by millisecond (an id's sequence number counts per stream), so an
  entry from the very millisecond of the ``/forget`` entry is kept too.

A stream with no group (the dead letters; nobody consumes them) has no unread work.

Cost: one ``XINFO GROUPS`` per stream, then one ``XRANGE`` per page and one ``XDEL`` per page
with a match. An entry that cannot mention the user (their id as a JSON string is not in it) is
skipped without parsing: 200,000 entries in 32 streams take about 0.5 s on a real Redis. The
in-process bus keeps nothing after an ack: ``for_bus`` returns None for it and ``/forget`` has
nothing to erase there. The embedded store (``memory://``) implements every command used here
(``XINFO GROUPS``, exclusive ``XRANGE`` starts, ``XDEL``); the tests run on both.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, cast

from pydantic import BaseModel

from bot.bus.streams_ops import id_key
from bot.bus.streams_publish import FIELD, StreamsPublisher
from bot.bus.topics import DEAD_LETTERS, DELETIONS, INBOUND, moderation_topic, outbound_topic
from bot.events import ChatMessage
from bot.state import keys
from bot.state.client import Redis, ResponseError

log = logging.getLogger("chorus.bus")

Id = tuple[int, int]
Match = Callable[[dict[str, Any]], bool]
_MAX_SEQ = 2**64 - 1


@dataclass(frozen=True)
class Erased:
    """How many of the user's entries were deleted, per topic."""

    messages: int = 0
    deletions: int = 0
    replies: int = 0
    dead_letters: int = 0
    moderation: int = 0

    @property
    def total(self) -> int:
        return self.messages + self.deletions + self.replies + self.dead_letters + self.moderation


class BusEraser(Protocol):
    """What ``/forget`` needs of a bus that keeps events after they are handled."""

    async def erase_user(
        self, platform: str, user_id: str, *, request: ChatMessage | None = None
    ) -> Erased: ...


class StreamEraser:
    """Deletes one user's entries from every stream of a Redis Streams bus namespace."""

    def __init__(
        self,
        redis: Redis,
        *,
        namespace: str = "main",
        partitions: int = 16,
        partition_of: Callable[[BaseModel], int] | None = None,
        page: int = 500,
    ) -> None:
        if partitions < 1 or page < 1:
            raise ValueError("partitions and page must be positive")
        self._redis = redis
        self.namespace = namespace
        self.partitions = partitions
        self._partition_of = partition_of
        self.page = page

    @classmethod
    def for_bus(cls, bus: object, redis: Redis) -> StreamEraser | None:
        """The eraser for ``bus`` (``redis`` is its client), or None when it keeps nothing."""
        if isinstance(bus, StreamsPublisher):
            return cls(
                redis,
                namespace=bus.namespace,
                partitions=bus.partitions,
                partition_of=bus.partition_of,
            )
        return None

    async def erase_user(
        self, platform: str, user_id: str, *, request: ChatMessage | None = None
    ) -> Erased:
        """Delete ``user_id``'s (on ``platform``) entries, except the ones the module docstring
        keeps; ``request`` is the ``/forget`` message being handled, if any. Idempotent."""
        seconds, micros = await self._redis.time()
        end: Id = (int(seconds) * 1000 + int(micros) // 1000, _MAX_SEQ)  # nothing newer
        needle = _needle(user_id)
        their_ids: set[str] = set()

        def inbound(event: dict[str, Any]) -> bool:
            if event.get("platform") != platform or _at(event, "author", "id") != user_id:
                return False
            their_ids.add(str(event.get("id")))
            return True

        messages = 0
        bound = end
        for partition in self._inbound_order(request):
            stream = keys.bus_stream(INBOUND, partition, self.namespace)
            count, request_id = await self._erase(stream, bound, inbound, needle, request)
            messages += count
            if request_id is not None:  # what came later was written after /forget; an id's
                # sequence counts per stream, so in the others only earlier milliseconds count
                bound = min(bound, (request_id[0] - 1, _MAX_SEQ))

        def deletion(event: dict[str, Any]) -> bool:
            if _at(event, "conversation", "platform") != platform:
                return False
            message_id = event.get("message_id")
            return event.get("author_id") == user_id or (
                isinstance(message_id, str) and message_id in their_ids
            )

        def reply(event: dict[str, Any]) -> bool:
            addressed = event.get("addressed_user_ids")
            return (
                _at(event, "conversation", "platform") == platform
                and isinstance(addressed, list)
                and user_id in addressed
            )

        def dead_letter(event: dict[str, Any]) -> bool:
            return (
                _at(event, "message", "platform") == platform
                and _at(event, "message", "author", "id") == user_id
            )

        def action(event: dict[str, Any]) -> bool:
            return event.get("user_id") == user_id

        erased = Erased(
            messages=messages,
            deletions=await self._erase_topic(DELETIONS, end, deletion, None),
            replies=await self._erase_topic(outbound_topic(platform), end, reply, needle),
            dead_letters=await self._erase_topic(DEAD_LETTERS, end, dead_letter, needle),
            moderation=await self._erase_topic(moderation_topic(platform), end, action, needle),
        )
        log.info(
            "erased a user's entries from the bus streams",
            extra={
                "platform": platform,
                "namespace": self.namespace,
                "messages": erased.messages,
                "deletions": erased.deletions,
                "replies": erased.replies,
                "dead_letters": erased.dead_letters,
                "moderation": erased.moderation,
            },
        )
        return erased

    def _inbound_order(self, request: ChatMessage | None) -> list[int]:
        """Every partition, the ``/forget`` message's own first: finding its entry there bounds
        what counts as "before /forget" in the others."""
        order = list(range(self.partitions))
        if request is not None and self._partition_of is not None:
            first = self._partition_of(request)
            if 0 <= first < self.partitions:
                order.remove(first)
                order.insert(0, first)
        return order

    async def _erase_topic(self, topic: str, end: Id, match: Match, needle: str | None) -> int:
        total = 0
        for partition in range(self.partitions):
            stream = keys.bus_stream(topic, partition, self.namespace)
            total += (await self._erase(stream, end, match, needle))[0]
        return total

    async def _erase(
        self,
        stream: str,
        bound: Id,
        match: Match,
        needle: str | None,
        request: ChatMessage | None = None,
    ) -> tuple[int, Id | None]:
        """Delete the entries of ``stream`` up to ``bound`` (and read by every group) that
        ``match``. With ``request``, the scan stops at its entry (kept; what follows it is
        newer), whose id is returned with the count."""
        try:
            groups = await self._redis.xinfo_groups(stream)
        except ResponseError:
            return 0, None  # no such stream
        for group in groups:
            bound = min(bound, id_key(str(group.get("last-delivered-id") or "0-0")))
        erased = 0
        start = "-"
        while bound > (0, 0):
            page = await self._redis.xrange(stream, start, f"{bound[0]}-{bound[1]}", self.page)
            rows = cast("list[tuple[str, dict[str, str]]]", page or [])
            doomed: list[str] = []
            found: Id | None = None
            for entry_id, fields in rows:
                event = _load(fields.get(FIELD), needle)
                if event is None:
                    continue
                if request is not None and _is_request(event, request):
                    found = id_key(entry_id)
                    break
                if match(event):
                    doomed.append(entry_id)
            if doomed:
                erased += int(await self._redis.xdel(stream, *doomed))
            if found is not None:
                return erased, found
            if len(rows) < self.page:
                break
            start = f"({rows[-1][0]}"
        return erased, None


def _is_request(event: dict[str, Any], request: ChatMessage) -> bool:
    return (
        event.get("platform") == request.platform
        and event.get("id") == request.id
        and _at(event, "author", "id") == request.author.id
    )


def _needle(user_id: str) -> str | None:
    """``user_id`` as it appears in an entry's JSON, when that is certain (no character JSON
    escapes); None means every entry is parsed."""
    if all(char >= " " and char not in '"\\' for char in user_id):
        return f'"{user_id}"'
    return None


def _load(payload: str | None, needle: str | None) -> dict[str, Any] | None:
    if payload is None or (needle is not None and needle not in payload):
        return None
    try:
        event = json.loads(payload)
    except ValueError:
        return None  # not ours to judge: the consumer logs it
    return event if isinstance(event, dict) else None


def _at(event: dict[str, Any], *path: str) -> object:
    value: object = event
    for name in path:
        if not isinstance(value, dict):
            return None
        value = value.get(name)
    return value
