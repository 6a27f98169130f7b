"""Writes to a real Redis: no task per command, and redis-py's write timeout kept; replies
already received read without a timer, and a reply that does not come still timed out
(bot/state/writes.py).

The first tests run against the real Redis on 127.0.0.1:6379; the others against a loopback TCP
server that answers the connection's greeting and then stops reading, the way a hung Redis or a
black-holed link looks from the client.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import (
    AbstractConnection,
    Connection,
    SSLConnection,
    UnixDomainSocketConnection,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.typing import EncodableT

from bot.state import connect, writes
from bot.state.writes import timed_writes

BIG = b"x" * (64 << 20)  # far more than the kernel's socket buffers take


async def checkout(client: Redis) -> AbstractConnection:
    """One connection of ``client``'s pool, to drive by hand (release it after)."""
    connection: AbstractConnection = await client.connection_pool.get_connection()  # type: ignore[no-untyped-call]
    return connection


async def test_commands_and_pipelines_create_no_task(key_tag: str) -> None:
    client = await connect.open_redis("redis://127.0.0.1:6379/15")
    loop = asyncio.get_running_loop()
    created: list[str] = []
    default = loop.get_task_factory()

    def counting(
        loop: asyncio.AbstractEventLoop, coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any]
    ) -> asyncio.Future[Any]:
        created.append(getattr(coro, "__qualname__", repr(coro)))
        if default is not None:
            return default(loop, coro)
        return asyncio.Task(coro, loop=loop)

    try:
        connection = await checkout(client)  # opened before counting
        assert connection.socket_timeout  # redis-py's default bound on every write (5 s)
        await client.connection_pool.release(connection)
        loop.set_task_factory(counting)
        try:
            for i in range(20):
                await client.set(f"{key_tag}:w:{i}", i, ex=60)
            assert await client.get(f"{key_tag}:w:19") == "19"
            assert created == []  # redis-py's own write path made a task per command (wait_for)
            async with client.pipeline(transaction=True) as pipe:
                pipe.incr(f"{key_tag}:w:n")
                pipe.expire(f"{key_tag}:w:n", 60)
                assert await pipe.execute() == [1, True]
        finally:
            loop.set_task_factory(default)
        # a pipeline's only task is redis-py's shielded hand-back of its connection
        assert not [name for name in created if "send_packed_command" in name], created
        made = client.connection_pool.connection_class
        assert issubclass(made, Connection) and made.__name__ == "TimedConnection"
    finally:
        await client.delete(*[f"{key_tag}:w:{i}" for i in range(20)], f"{key_tag}:w:n")
        await client.aclose()


async def test_replies_already_received_are_read_without_a_timer(
    key_tag: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """redis-py arms a timer for every reply; a pipeline's replies arrive together, and only
    the first needs to wait. Replies and errors are what redis-py's own reading gives."""
    import redis.asyncio.connection as connection_module

    timers: list[float] = []
    armed = connection_module.async_timeout  # type: ignore[attr-defined]

    def counting(delay: float | None) -> Any:
        timers.append(delay or 0.0)
        return armed(delay)

    client = await connect.open_redis("redis://127.0.0.1:6379/15")
    key = f"{key_tag}:r"
    try:
        await client.set(f"{key}:s", "text", ex=60)
        monkeypatch.setattr(connection_module, "async_timeout", counting)
        async with client.pipeline(transaction=False) as pipe:
            for _ in range(30):
                pipe.incr(f"{key}:n")
            pipe.lpush(f"{key}:s", "x")  # WRONGTYPE, in the middle
            pipe.get(f"{key}:s")
            results = await pipe.execute(raise_on_error=False)
        assert results[:30] == list(range(1, 31))
        assert isinstance(results[30], ResponseError) and "WRONGTYPE" in str(results[30])
        assert results[31] == "text"
        assert len(timers) < 16  # redis-py's own reading armed 32, one per reply
        with pytest.raises(ResponseError, match="WRONGTYPE"):
            await client.lpush(f"{key}:s", "x")
    finally:
        monkeypatch.undo()
        await client.delete(f"{key}:s", f"{key}:n")
        await client.aclose()


class DeafServer:
    """Answers each command of the greeting with +OK (PING with +PONG), then stops reading."""

    def __init__(self) -> None:
        self.deaf = False
        self.connections: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None
        self.port = 0

    async def __aenter__(self) -> DeafServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    def go_deaf(self) -> None:
        """Read nothing more from any connection: their socket buffers fill up."""
        self.deaf = True
        for writer in self.connections:
            writer.transport.pause_reading()  # type: ignore[attr-defined]

    async def __aexit__(self, *exc: object) -> None:
        for writer in self.connections:
            writer.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(writer)
        while not self.deaf:
            line = await reader.readline()
            if not line:
                return
            if not line.startswith(b"*"):
                continue
            count, words = int(line[1:]), []
            for _ in range(count):
                size = int((await reader.readline())[1:])
                words.append((await reader.readexactly(size + 2))[:-2].upper())
            writer.write(b"+PONG\r\n" if words[:1] == [b"PING"] else b"+OK\r\n")
            await writer.drain()


@pytest.fixture
async def deaf() -> AsyncIterator[DeafServer]:
    async with DeafServer() as server:
        yield server


@asynccontextmanager
async def greeted(server: DeafServer, socket_timeout: float) -> AsyncIterator[AbstractConnection]:
    """A connection of a client of ``server`` with that socket timeout, through
    the greeting and checked out of its pool; handed back and the client closed after."""
    client = await connect.open_redis(
        f"redis://127.0.0.1:{server.port}/0?socket_timeout={socket_timeout:g}"
    )
    try:
        await client.ping()
        connection = await checkout(client)
        try:
            yield connection
        finally:
            await client.connection_pool.release(connection)
    finally:
        await client.aclose()


async def test_a_write_the_server_never_reads_times_out_and_drops_the_connection(
    deaf: DeafServer,
) -> None:
    async with greeted(deaf, 0.5) as connection:
        deaf.go_deaf()
        assert connection.is_connected
        with pytest.raises(RedisTimeoutError, match="Timeout writing to socket"):
            await connection.send_command("SET", "big", BIG)
        assert not connection.is_connected  # half a command sent: the connection is gone


async def test_a_reply_that_never_comes_times_out_and_drops_the_connection(
    deaf: DeafServer,
) -> None:
    async with greeted(deaf, 0.5) as connection:
        deaf.go_deaf()
        await connection.send_command("GET", "k")  # small: the socket's buffer takes it
        with pytest.raises(RedisTimeoutError, match="Timeout reading"):
            await connection.read_response()
        assert not connection.is_connected


async def test_a_write_cancelled_midway_drops_the_connection(deaf: DeafServer) -> None:
    async with greeted(deaf, 30) as connection:
        deaf.go_deaf()
        write = asyncio.create_task(connection.send_command("SET", "big", BIG))
        await asyncio.sleep(0.2)
        assert not write.done()  # the socket's buffer is full: the write waits
        write.cancel()
        with pytest.raises(asyncio.CancelledError):
            await write
        assert not connection.is_connected


async def test_a_write_to_a_reset_connection_names_the_error(deaf: DeafServer) -> None:
    async with greeted(deaf, 5) as connection:
        assert connection._writer is not None
        transport = connection._writer.transport
        transport.abort()  # the socket is closed under the connection
        await asyncio.sleep(0)
        with pytest.raises(RedisConnectionError):
            for _ in range(3):  # the first write may still land in the closing transport
                await connection.send_command("SET", "k", "v")


def test_every_kind_of_connection_gets_the_same_writes() -> None:
    for base in (Connection, SSLConnection, UnixDomainSocketConnection):
        timed = timed_writes(base)
        assert issubclass(timed, base) and timed is not base
        assert timed_writes(base) is timed and timed_writes(timed) is timed


def test_a_consumers_read_is_packed_once_and_byte_for_byte_as_redis_py_packs_it() -> None:
    plain, timed = Connection(), timed_writes(Connection)()
    streams = [f"chorus:v1:bus:main:stream:inbound:{p}" for p in range(16)]
    read: tuple[str | int, ...] = ("XREADGROUP", "GROUP", "agent", "w1", "COUNT", 64)
    read += ("BLOCK", 1000, "STREAMS")
    args = (*read, *streams, *[">"] * 16)
    first = timed.pack_command(*args)
    assert b"".join(first) == b"".join(plain.pack_command(*args))
    assert timed.pack_command(*args) is first  # kept, not packed again
    fewer = (*read, *streams[:8], *[">"] * 8)  # partitions moved: a different read
    assert b"".join(timed.pack_command(*fewer)) == b"".join(plain.pack_command(*fewer))
    assert timed.pack_command(*fewer) is not first
    other: tuple[str, ...] = ("SET", "k", "v")
    assert b"".join(timed.pack_command(*other)) == b"".join(plain.pack_command(*other))
    assert timed.pack_command(*other) is not timed.pack_command(*other)  # only reads are kept


def test_every_command_is_packed_as_redis_py_packs_it() -> None:
    assert writes._HIREDIS is not None  # hiredis is a dependency: its packer is the one in use
    plain, timed = Connection(), timed_writes(Connection)()
    rng = random.Random(20)
    values: list[Callable[[], EncodableT]] = [
        lambda: rng.choice(["", "k", "é ü 日本", "a b", '{"t": "x\\r\\n"}']),
        lambda: rng.randint(-(10**20), 10**20),
        lambda: rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-30, 30),
        lambda: bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 40))),
        lambda: bytearray(b"raw\r\n"),
        lambda: memoryview(b"view"),
        lambda: "x" * rng.choice([10, 7000, 70000]),  # below and above redis-py's cutoff
    ]
    for _ in range(500):
        names: list[EncodableT] = ["SET", "XADD", "CONFIG GET", b"HSET"]
        name = rng.choice(names)
        args: tuple[EncodableT, ...] = (name,)
        args += tuple(rng.choice(values)() for _ in range(rng.randint(0, 12)))
        assert b"".join(timed.pack_command(*args)) == b"".join(plain.pack_command(*args)), args
    commands = [("SET", "k", 1), ("EVAL", "return 1", 0), ("GET", "é")]
    assert b"".join(timed.pack_commands(commands)) == b"".join(plain.pack_commands(commands))
    for bad in (None, True):
        with pytest.raises(DataError) as ours:
            timed.pack_command("SET", "k", bad)  # type: ignore[arg-type]
        with pytest.raises(DataError) as theirs:
            plain.pack_command("SET", "k", bad)  # type: ignore[arg-type]
        assert str(ours.value) == str(theirs.value)
