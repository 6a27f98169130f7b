"""The embedded store's direct path: a command runs as a plain call into fakeredis.

Why: on the wire path every command of the embedded store borrows a pooled connection (an
``asyncio.Lock`` twice), goes through redis-py's retry wrapper and its metrics hooks, lands in
the socket's reply queue (an ``asyncio.Queue`` and an ``Event``) and is read back out by three
coroutines, for a store that answers synchronously in the same thread: about a sixth of an
in-process turn's instructions. Here the client keeps one connection of its own outside the
pool (connected once the ordinary way, handshake included) and hands each command straight to
its socket's dispatch (``_process_command``, what the parser would call); the socket keeps the
reply instead of queueing it; the reply is then read as redis-py reads it (an error reply
raised as the same exception class, bytes decoded, the command's response callback applied),
so callers see what they saw before. Pipelines do the same, with ``MULTI``/``EXEC`` around a
transaction's commands and redis-py's own bookkeeping of the replies.

Only commands in ``DIRECT`` take it: commands that never block, never change the connection's
state (``SELECT``, ``WATCH``, ``MULTI``, ``CLIENT``, subscriptions) and cannot be told apart
from one connection to another. Everything else, a client or pipeline holding a connection
(``WATCH``), a pipeline with scripts to load, and a store that is down or a socket killed by
``CLIENT KILL``, takes the wire path as before. ``tests/test_embedded_store.py`` counts the
commands that took this path (``COUNTS.direct``), so a fakeredis whose internals moved fails
there, not silently slower.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any, cast

import fakeredis
from fakeredis._typing import RaiseErrorTypes
from redis.asyncio.client import Pipeline
from redis.asyncio.connection import ConnectionPool
from redis.client import EMPTY_RESPONSE, NEVER_DECODE
from redis.exceptions import ExecAbortError, ResponseError, WatchError

_NAMES = """
    GET SET MGET MSET SETNX SETEX PSETEX GETDEL GETEX GETSET APPEND STRLEN INCR INCRBY DECR DECRBY
    INCRBYFLOAT DEL UNLINK EXISTS TYPE TTL PTTL PERSIST EXPIRE PEXPIRE EXPIREAT PEXPIREAT
    LPUSH RPUSH LPUSHX RPUSHX LPOP RPOP LRANGE LTRIM LLEN LINDEX LREM LSET
    HGET HSET HSETNX HMSET HMGET HGETALL HDEL HINCRBY HINCRBYFLOAT HEXISTS HLEN HKEYS HVALS
    SADD SREM SMEMBERS SISMEMBER SMISMEMBER SCARD ZADD ZREM ZINCRBY ZSCORE ZMSCORE ZCARD ZCOUNT
    ZRANK ZREVRANK ZRANGE ZREVRANGE ZRANGEBYSCORE ZREVRANGEBYSCORE ZREMRANGEBYRANK ZREMRANGEBYSCORE
    XADD XLEN XRANGE XREVRANGE XACK XDEL XTRIM EVAL EVALSHA PING
"""
# Commands that answer at once from the data alone (no blocking variant, no connection state;
# a script cannot block either: fakeredis refuses blocking commands inside one).
DIRECT = frozenset(_NAMES.split())


class Counts:
    """How often each fast path of the embedded store ran (tests read them).

    One instance, not class attributes: writing an attribute of a class invalidates CPython's
    type caches, after which every attribute lookup on that class's instances is slow again
    until re-specialised; a counter bumped that way on the socket class made a ``GET`` through
    the store cost 6.2 µs instead of 2.6 µs."""

    __slots__ = ("direct", "unpacked", "native_commands", "native_evals", "unparsed_evals")

    def __init__(self) -> None:
        self.direct = 0  # commands that took the direct path (here)
        self.unpacked = 0  # commands handed to the socket without RESP (bot.state.embedded)
        self.native_commands = 0  # commands run natively (bot.state.embedded_native)
        self.native_evals = 0  # guarded commits and alias reads run natively
        self.unparsed_evals = 0  # of those, the ones whose arguments were not parsed


COUNTS = Counts()


class Pool(ConnectionPool):
    """The client's connection pool, plus the one connection the direct path uses."""

    _direct: Any = None

    def live(self) -> Any:
        """The direct connection, if it can take a command now (else None: the wire path)."""
        conn = self._direct
        sock = conn._sock if conn is not None else None
        if sock is None or sock._killed or sock._server is None or not sock._server.connected:
            return None
        return conn

    async def open_direct(self) -> Any:
        """Connect the direct connection (the ordinary handshake, through the wire path)."""
        if self.live() is None:
            conn = self.make_connection()  # type: ignore[no-untyped-call]
            try:
                await conn.connect()
            except Exception:  # the wire path will fail the same way, in its own words
                return None
            if self.live() is not None:  # another task connected one meanwhile: use that
                await conn.disconnect()
                return self._direct
            conn._sock.replies = []
            conn.direct_encode, conn.direct_decode = _codec(conn)
            self._direct = conn
        return self._direct

    def run(self, conn: Any, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Each command's reply as the socket would have queued it, in order. All are encoded
        before any runs, as redis-py packs a pipeline whole (a bad argument sends nothing)."""
        sock, encode = conn._sock, conn.direct_encode
        packed = [[encode(arg) for arg in args] for args in commands]
        replies: list[Any] = sock.replies
        try:
            for fields in packed:
                sock._process_command(fields)
            if len(replies) != len(packed):  # a reply suppressed or held back: never here
                raise RuntimeError("the embedded store's direct path lost a reply")
            COUNTS.direct += len(packed)
            return replies[:]
        finally:
            replies.clear()

    async def disconnect(self, inuse_connections: bool = True) -> None:
        conn, self._direct = self._direct, None
        if conn is not None:
            await conn.disconnect()
        await super().disconnect(inuse_connections)


def _codec(conn: Any) -> tuple[Callable[[Any], bytes], Callable[[Any], Any]]:
    """redis-py's encoder and fakeredis's reply decoding, with the common exact types (str,
    bytes, int; bytes, list, int, None) done first: a turn encodes and decodes ~130 values."""
    encoder, slow_decode = conn.encoder, conn._decode
    encoding, errors = encoder.encoding, encoder.encoding_errors

    def encode(value: Any) -> bytes:
        kind = type(value)
        if kind is str:
            return value.encode(encoding, errors)  # type: ignore[no-any-return]
        if kind is bytes:
            return value  # type: ignore[no-any-return]
        if kind is int:
            return repr(value).encode()
        return encoder.encode(value)  # type: ignore[no-any-return]

    def decode(reply: Any) -> Any:
        kind = type(reply)
        if kind is bytes:
            return reply.decode(encoding, errors)
        if kind is list:
            return [decode(item) for item in reply]
        if kind is int or reply is None:
            return reply
        return slow_decode(reply)

    return encode, decode if encoder.decode_responses else slow_decode


def read(conn: Any, callbacks: Any, name: Any, reply: Any, options: Any) -> Any:
    """``reply`` as redis-py's ``parse_response`` returns it (may be awaitable, as there)."""
    if isinstance(reply, RaiseErrorTypes):
        if EMPTY_RESPONSE in options and isinstance(reply, ResponseError):
            return options[EMPTY_RESPONSE]
        raise reply
    if NEVER_DECODE in options:
        options.pop(NEVER_DECODE)
    else:
        reply = conn.direct_decode(reply)
    options.pop(EMPTY_RESPONSE, None)
    options.pop("keys", None)
    callback = callbacks.get(name)
    return reply if callback is None else callback(reply, **options)


class Client(fakeredis.FakeAsyncRedis):
    """A fakeredis client whose plain commands and pipelines take the direct path."""

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        pool = cast(Pool, self.connection_pool)
        conn = None
        if args[0] in DIRECT and self.connection is None and not self.single_connection_client:
            conn = pool.live() or await pool.open_direct()
        if conn is None:
            return await super().execute_command(*args, **options)  # type: ignore[no-untyped-call]
        (reply,) = pool.run(conn, (args,))
        result = read(conn, self.response_callbacks, args[0], reply, options)
        return await result if inspect.isawaitable(result) else result

    def pipeline(self, transaction: bool = True, shard_hint: str | None = None) -> Pipeline:
        return _Pipeline(self.connection_pool, self.response_callbacks, transaction, shard_hint)


class _Pipeline(Pipeline):
    async def execute(self, raise_on_error: bool = True) -> list[Any]:
        stack = self.command_stack
        conn = None
        if (
            stack
            and not self.watching
            and not self.scripts
            and self.connection is None
            and all(args[0] in DIRECT for args, _ in stack)
        ):
            pool = cast(Pool, self.connection_pool)
            conn = pool.live() or await pool.open_direct()
        if conn is None:
            return await super().execute(raise_on_error)
        try:
            if self.is_transaction or self.explicit_transaction:
                return await self._direct_transaction(conn, raise_on_error)
            return await self._direct_pipeline(conn, raise_on_error)
        finally:
            await self.reset()  # type: ignore[no-untyped-call]

    async def _direct_pipeline(self, conn: Any, raise_on_error: bool) -> list[Any]:
        """redis-py's ``_execute_pipeline``: each reply read in turn, an error reply kept."""
        stack = self.command_stack
        replies = cast(Pool, self.connection_pool).run(conn, [args for args, _ in stack])
        response: list[Any] = []
        for (args, options), reply in zip(stack, replies, strict=True):
            try:
                result = read(conn, self.response_callbacks, args[0], reply, options)
                response.append(await result if inspect.isawaitable(result) else result)
            except ResponseError as exc:
                response.append(exc)
        if raise_on_error:
            self.raise_first_error(stack, response)
        return response

    async def _direct_transaction(self, conn: Any, raise_on_error: bool) -> list[Any]:
        """redis-py's ``_execute_transaction``, over the replies of MULTI, the commands, EXEC."""
        stack = self.command_stack
        sent = [args for args, options in stack if EMPTY_RESPONSE not in options]
        replies = iter(cast(Pool, self.connection_pool).run(conn, [("MULTI",), *sent, ("EXEC",)]))
        errors: list[tuple[int, Any]] = []
        try:
            read(conn, {}, "_", next(replies), {})  # MULTI
        except ResponseError as err:
            errors.append((0, err))
        for i, (args, options) in enumerate(stack):
            if EMPTY_RESPONSE in options:
                errors.append((i, options[EMPTY_RESPONSE]))
                continue
            try:
                read(conn, {}, "_", next(replies), {})
            except ResponseError as err:
                self.annotate_exception(err, i + 1, args)
                errors.append((i, err))
        try:
            response = read(conn, {}, "_", next(replies), {})
        except ExecAbortError as err:
            if errors:
                raise errors[0][1] from err
            raise
        self.watching = False
        if response is None:
            raise WatchError("Watched variable changed.") from None
        for i, e in errors:
            response.insert(i, e)
        if len(response) != len(stack):
            raise ResponseError("Wrong number of response items from pipeline execution") from None
        if raise_on_error:
            self.raise_first_error(stack, response)
        data = []
        for r, (args, options) in zip(response, stack, strict=False):
            if not isinstance(r, Exception):
                cast(dict[str, Any], options).pop("keys", None)
                if args[0] in self.response_callbacks:
                    r = self.response_callbacks[args[0]](r, **options)
                    if inspect.isawaitable(r):
                        r = await r
            data.append(r)
        return data
