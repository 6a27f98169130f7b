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

from bot.state import keys

_inside: ContextVar[bool] = ContextVar("roundtrips_inside", default=False)

_HANDSHAKE = (b"HELLO", b"CLIENT", b"SELECT", b"AUTH")
_LOG_LINES = f"{keys.PREFIX}:logs:".encode()  # keys.log_lines: the dashboard's log stream


def _command(packed: bytes) -> bytes:
    """The name of the first command in a RESP-encoded write."""
    commands = wire_commands(packed)
    return commands[0][0].upper() if commands and commands[0] else b""


def packed(command: Any) -> bytes:
    """The bytes ``send_packed_command`` writes for ``command`` (one chunk or a list of them)."""
    chunks = [command] if isinstance(command, bytes | str) else list(command)
    return b"".join(c.encode() if isinstance(c, str) else bytes(c) for c in chunks)


class RoundTrips:
    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.handshakes: list[bytes] = []  # a new pooled connection's setup commands

    @property
    def count(self) -> int:
        return len(self.writes)

    @property
    def turn(self) -> list[bytes]:
        """The writes less the log stream's: a warning logged while a turn runs is shipped to
        the dashboard's stream (``XADD``) in a write of its own, whenever the log throttle
        lets it through, which on a starved CPU can be inside a counted turn."""
        return [w for w in self.writes if not _log_line(w)]


def _log_line(packed: bytes) -> bool:
    """Whether a write is one command, an ``XADD`` to a deployment's log stream."""
    commands = wire_commands(packed)
    return (
        len(commands) == 1
        and commands[0][0].upper() == b"XADD"
        and commands[0][1].startswith(_LOG_LINES)
    )


def wire_commands(packed: bytes) -> list[list[bytes]]:
    """The commands of a RESP-encoded write, each as its fields (an array of bulk strings)."""
    commands: list[list[bytes]] = []
    at = 0
    while at < len(packed):
        end = packed.index(b"\r\n", at)
        count, at = int(packed[at + 1 : end]), end + 2  # "*<fields>"
        fields = []
        for _ in range(count):
            end = packed.index(b"\r\n", at)
            size, at = int(packed[at + 1 : end]), end + 2  # "$<bytes>"
            fields.append(packed[at : at + size])
            at += size + 2
        commands.append(fields)
    return commands


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
            count(packed(command))
            reset = _inside.set(True)
            try:
                await original(self, command, check_health)
            finally:
                _inside.reset(reset)

        return counting

    with mock.patch.object(AbstractConnection, "send_packed_command", counting_through(original)):
        yield counter
