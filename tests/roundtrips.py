"""Counting Redis round trips where they happen.

Every write of one command, or of a whole pipeline, to a connection goes through
``AbstractConnection.send_packed_command``, for redis-py and fakeredis alike; one write is one
round trip. The handshake of a connection the pool opens (``HELLO``, ``CLIENT ...``,
``SELECT``, ``AUTH``) is counted apart: it happens once per pooled connection, not per message.
Used by the store tests, the router test and the benchmark.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any
from unittest import mock

from redis.asyncio.connection import AbstractConnection

_inside: ContextVar[bool] = ContextVar("roundtrips_inside", default=False)

_HANDSHAKE = (b"HELLO", b"CLIENT", b"SELECT", b"AUTH")


def _command(packed: bytes) -> bytes:
    """The name of the first command in a RESP-encoded write (its third CRLF-separated field)."""
    parts = packed.split(b"\r\n", 3)
    return parts[2].upper() if len(parts) > 2 else b""


def _wire(chunk: Any) -> bytes:
    return chunk.encode() if isinstance(chunk, str) else bytes(chunk)


class RoundTrips:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.handshakes: list[bytes] = []  # a new pooled connection's setup commands

    @property
    def count(self) -> int:
        return len(self.writes)


@contextmanager
def counting_round_trips() -> Iterator[RoundTrips]:
    counter = RoundTrips()
    original = AbstractConnection.send_packed_command

    def count(packed: bytes) -> None:
        if _command(packed) in _HANDSHAKE:
            counter.handshakes.append(packed)
        else:
            counter.writes.append(packed)

    def counting_through(original: Any) -> Any:
        async def counting(
            self: AbstractConnection, command: Any, check_health: bool = True
        ) -> None:
            if _inside.get():  # a write made inside a counted one: the same round trip
                await original(self, command, check_health)
                return
            chunks = [command] if isinstance(command, bytes | str) else list(command)
            count(b"".join(_wire(c) for c in chunks))
            reset = _inside.set(True)
            try:
                await original(self, command, check_health)
            finally:
                _inside.reset(reset)

        return counting

    with mock.patch.object(AbstractConnection, "send_packed_command", counting_through(original)):
        yield counter
