"""Writes to a real Redis bounded by ``asyncio.timeout``, not ``asyncio.wait_for``; replies
already received read without a timer.

redis-py gives every connection a socket timeout (5 s by default), and bounds each write to the
socket with ``asyncio.wait_for``. On Python 3.11 ``wait_for`` runs the awaited coroutine as a
new task: a task, a timer and an extra pass of the event loop for every command and pipeline,
although the write itself almost never waits (the socket's buffer takes it at once). Over the
Redis Streams bus an answered message makes six such writes in the benchmark (three are the
worker's); their tasks were 2.3% of its instructions (``python -m bench.instructions``).

``asyncio.timeout`` bounds the same write in the caller's own task, with one timer handle. The
behaviour is redis-py's otherwise, error for error: a write that cannot finish within the socket
timeout disconnects and raises ``redis.exceptions.TimeoutError``, an ``OSError`` disconnects and
raises ``ConnectionError`` naming it, and anything else (a cancellation) disconnects and
propagates, since a half-written command leaves the connection unusable. Without a socket
timeout, or while a connection is not yet open, redis-py's own method runs unchanged.

Commands are packed by hiredis's C packer (a dependency already, for parsing replies), as
redis-py's synchronous client does; redis-py's asynchronous one packs in Python, which was the
largest single cost of redis-py per message. A consumer's blocking read (``XREADGROUP`` over
every partition's stream) is packed once per connection and reused, since its forty-odd
arguments are the same on every read.

redis-py also arms a timer (``asyncio.timeout``) for every reply it reads, one per command of a
pipeline although its replies arrive together: a reply hiredis has already parsed from the
buffer is taken at once, with the parser's and the connection's own checks (a connection error,
a RESP3 push, an error reply raised as redis-py raises it); only a reply still to come is
read redis-py's way, timer included (-7% instructions per message over Redis Streams).

``tests/test_redis_writes.py`` checks all of it: that a write creates no task, that a server
which stops reading turns a write into that ``TimeoutError`` within the timeout, and that what
is packed, kept or not, is byte for byte what redis-py's own packer makes of the same arguments
(and fails where it fails); that a pipeline's replies and error replies read as before with
a timer for the first only, and that a reply that never comes still times out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from redis._parsers.hiredis import NOT_ENOUGH_DATA
from redis.asyncio.connection import AbstractConnection
from redis.connection import HiredisRespSerializer
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.utils import HIREDIS_AVAILABLE

_classes: dict[type[AbstractConnection], type[AbstractConnection]] = {}
_HIREDIS = HiredisRespSerializer() if HIREDIS_AVAILABLE else None


_PACKED_LIMIT = 64  # distinct blocking reads a connection keeps packed (they are a handful)


class _TimedWrites:
    """Mixed in before a redis-py connection class (TCP, TLS or Unix socket): its packing,
    its writes and its reading of replies already received, as the module docstring says."""

    _packed_reads: dict[tuple[Any, ...], list[bytes]] | None = None

    def pack_command(self, *args: Any) -> list[bytes]:
        """A command as RESP bytes, as redis-py packs it, kept for a consumer's read
        (``XREADGROUP``): it names every partition's stream on every read, the same forty-odd
        arguments each time."""
        if args[0] != "XREADGROUP":
            return self._packed(args)
        cache = self._packed_reads
        if cache is None:
            cache = self._packed_reads = {}
        kept = cache.get(args)
        if kept is None:
            kept = self._packed(args)
            if len(cache) >= _PACKED_LIMIT:
                cache.clear()
            cache[args] = kept
        return kept

    def _packed(self, args: tuple[Any, ...]) -> list[bytes]:
        """hiredis's C packer where it gives redis-py's bytes (UTF-8, strict: redis-py's own
        synchronous client packs with it), else redis-py's Python packer, which also raises
        redis-py's own error for an argument neither takes (None, a bool)."""
        conn: Any = self
        encoder = conn.encoder
        if (
            _HIREDIS is not None
            and encoder.encoding == "utf-8"
            and encoder.encoding_errors == "strict"
        ):
            try:
                return _HIREDIS.pack(*args)  # type: ignore[no-any-return]
            except DataError:
                pass
        packed: list[bytes] = conn._pack(*args)
        return packed

    async def send_packed_command(
        self, command: bytes | str | Iterable[bytes], check_health: bool = True
    ) -> None:
        conn: Any = self  # the redis-py connection this is mixed into
        timeout = conn.socket_timeout
        if not timeout or not conn.is_connected or conn._writer is None:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
            return
        if check_health:
            await conn.check_health()
        if isinstance(command, str):
            command = command.encode()
        chunks = [command] if isinstance(command, bytes) else command
        try:
            async with asyncio.timeout(timeout):
                conn._writer.writelines(chunks)
                await conn._writer.drain()
        except TimeoutError:
            await conn.disconnect(nowait=True)
            raise RedisTimeoutError("Timeout writing to socket") from None
        except OSError as exc:
            await conn.disconnect(nowait=True)
            number, message = ("UNKNOWN", exc.args[0]) if len(exc.args) == 1 else exc.args[:2]
            raise RedisConnectionError(
                f"Error {number} while writing to socket. {message}."
            ) from exc
        except BaseException:
            await conn.disconnect(nowait=True)
            raise

    async def read_response(
        self,
        disable_decoding: bool = False,
        timeout: float | None = None,  # noqa: ASYNC109 - redis-py's own signature
        *,
        disconnect_on_error: bool = True,
        push_request: bool | None = False,
    ) -> Any:
        """A reply hiredis already holds, taken without a timeout; anything else redis-py's own
        way. redis-py bounds every reply it reads with ``asyncio.timeout`` (a timer armed and
        cancelled), also the nine replies of a pipeline that arrived in one read of the socket;
        a reply already parsed from the buffer cannot wait, so it needs no timer."""
        conn: Any = self
        parser = conn._parser
        reader = getattr(parser, "_reader", None)
        response: Any = NOT_ENOUGH_DATA
        if timeout is None and reader is not None and parser._connected:
            try:
                response = reader.gets(False) if disable_decoding else reader.gets()
                # the parser's own checks (hiredis.py, _AsyncHiredisParser.read_response)
                if isinstance(response, RedisConnectionError):
                    raise response
                push = parser._hiredis_PushNotificationType
                if push is not None and isinstance(response, push):  # RESP3: handled, then on
                    response = await parser.handle_push_response(response)
                    if not push_request:
                        response = NOT_ENOUGH_DATA  # the reply itself: read as below
                elif (
                    isinstance(response, list)
                    and response
                    and isinstance(response[0], RedisConnectionError)
                ):
                    raise response[0]
            except BaseException:
                if disconnect_on_error:
                    await conn.disconnect(nowait=True)
                raise
        if response is NOT_ENOUGH_DATA:  # not parsed yet: read and wait, with the timeout
            return await super().read_response(  # type: ignore[misc]
                disable_decoding,
                timeout,
                disconnect_on_error=disconnect_on_error,
                push_request=push_request,
            )
        if conn.health_check_interval:
            loop = asyncio.get_running_loop()
            conn.next_health_check = loop.time() + conn.health_check_interval
        if isinstance(response, ResponseError):
            raise response from None
        return response


def timed_writes(base: type[AbstractConnection]) -> type[AbstractConnection]:
    """``base`` (a redis-py connection class) with writes bounded by ``asyncio.timeout``,
    commands packed by hiredis and replies already received read without a timer."""
    if issubclass(base, _TimedWrites):
        return base
    made = _classes.get(base)
    if made is None:
        made = _classes[base] = type(
            f"Timed{base.__name__}", (_TimedWrites, base), {"_pack": base.pack_command}
        )
    return made
