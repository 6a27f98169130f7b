"""The embedded store (``memory://``): fakeredis, with the claims' guarded commit and the hot
commands run natively and commands handed over without the Redis wire format.

Why: every answered message commits through one Lua script (``bot.state.guarded.GUARDED``,
see ``bot.state.claims``). Real Redis runs it in C; fakeredis runs it through its Lua engine
(``lupa``), which compiles the script on every call, collects Lua's garbage after it and
checks Lua's globals around every ``redis.call``: about a fifth of all the instructions of an
in-process turn. This socket recognises that script (by its exact text) and does the same
in Python (and the ``/link`` alias read every answered message makes, ``bot.state.alias_scripts``
``LOAD``): it runs inside fakeredis's command dispatch, under the server's lock, so it is as
atomic as the script (nothing else runs between the token check and the commands), and each
command goes through this socket's ``_run_command``, so the data is what the script would
have written. Any other script still runs through Lua. The claim contract tests run over both
stores (tests/test_claims.py, tests/test_bus_contract.py), so a difference would show there.

Why no wire format: redis-py packs every command into RESP bytes and fakeredis parses them
back into the same list of arguments, in the same process, a tenth of a turn's instructions.
Here the connection hands the encoded arguments (``_Fields``) straight to the socket, which
dispatches them as its parser would have (``_process_command``); replies still travel as
before. While the socket is paused (a blocking command in progress) the arguments are packed
into RESP after all and queue behind what the parser holds, so the order never changes.
Most commands skip the connection altogether (``bot.state.embedded_direct``): this path is
for the rest (blocking commands, ``WATCH``, subscriptions, connection state).

Why native commands: fakeredis runs every command through generic machinery (arguments parsed
against a signature, a ``CommandItem`` per key written back after, the reply checked); for the
nine commands an answered message runs most (``bot.state.embedded_native``) that was more than
the work, so ``_run_command`` hands them to plain functions on the same data, and the socket's
dispatch (``_process_command``) skips the name lookup and closed-socket sweep it repeated per
command. fakeredis's own code runs instead for any shape of a command the native function does
not take and while anyone listens for keyspace events (they come from its dispatch); queued in
a transaction, the commands run natively at ``EXEC``, but the queueing is fakeredis's.

It reaches into fakeredis's socket internals (``_run_command``, ``_name_to_func``), which is
why fakeredis is pinned in constraints.txt; ``tests/test_embedded_store.py`` fails if a new
version stops taking this path.
"""

from __future__ import annotations

import time
from typing import Any

import fakeredis
from fakeredis import _msgs as msgs
from fakeredis._clients._async import FakeAsyncRedisConnection, FakeReader, FakeWriter
from fakeredis._commands import COMMANDS_WITH_SUB, SUPPORTED_COMMANDS
from fakeredis._helpers import SimpleError
from fakeredis._socket import AsyncFakeSocket
from fakeredis._socket._resp import extract_command
from redis.asyncio import Redis

from bot.state.alias_scripts import LOAD
from bot.state.embedded_direct import COUNTS, Client, Pool
from bot.state.embedded_native import FALLBACK, NATIVE
from bot.state.guarded import GUARDED

_GUARDED = GUARDED.encode()
_LOAD = LOAD.encode()
_NATIVE = {(_GUARDED, b"1"), (_LOAD, b"2")}  # (script, numkeys) run in Python, not Lua
_EVAL = SUPPORTED_COMMANDS["eval"]
_BY_SIGNATURE = {SUPPORTED_COMMANDS[name]: run for name, run in NATIVE.items()}
_QUICK = frozenset({b"EVAL", *(name.upper().encode() for name in NATIVE)})  # the prelude below


class _Fields(list[bytes]):
    """One command's arguments, encoded, as the connection hands them to the socket."""


def resp(fields: list[bytes]) -> bytes:
    """One command's arguments as RESP bytes, exactly as redis-py would have written them."""
    parts = [b"*%d\r\n" % len(fields)]
    for field in fields:
        parts += (b"$%d\r\n" % len(field), field, b"\r\n")
    return b"".join(parts)


class _Socket(AsyncFakeSocket):
    replies: list[Any] | None = None  # set: replies are kept here, not queued (embedded_direct)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._found: dict[bytes, tuple[Any, Any]] = {}

    def put_response(self, msg: Any) -> None:
        if self.replies is None:
            return super().put_response(msg)
        self.replies.append(msg)
        return None

    def sendall(self, data: Any) -> None:
        if type(data) is not _Fields:
            return super().sendall(data)
        if self._paused:  # behind what the parser holds back
            return super().sendall(resp(data))
        if not self._server.connected or self._killed:
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)
        COUNTS.unpacked += 1
        self._process_command(data)
        return None

    def _process_command(self, fields: list[bytes]) -> None:
        """fakeredis's own for the names in ``_QUICK`` (as redis-py spells them) outside a
        transaction, without what costs there and does nothing: the name decoded and looked up
        on every call (here once per socket) and the sweep for closed sockets raising
        ``IndexError`` when there are none. The ACL check, the clock, the arity check and the
        reply are fakeredis's own; anything else takes fakeredis's path whole."""
        server = self._server
        if (
            not fields
            or fields[0] not in _QUICK
            or self._transaction is not None
            or self._reply_off
            or self._reply_skip
            or self._reply_skip_next
            or server.closed_sockets
        ):
            return super()._process_command(fields)
        func, sig, args = self._resolve(fields)
        result: Any
        try:
            server.acl.validate_command(self._client_info.user, self._client_info, fields)
            with server.lock:
                now = time.time()
                for db in server.dbs.values():
                    db.time = now
                sig.check_arity(args, self.version)
                result = self._run_command(func, sig, args, False)
        except SimpleError as exc:
            result = exc
        self.put_response(self._decode_result(result))
        return None

    def _run_command(self, func: Any, sig: Any, args: list[Any], from_script: bool) -> Any:
        """fakeredis's own, except for the hot commands (``bot.state.embedded_native``, while
        nobody is subscribed to keyspace notifications) and a native script, whose ~30
        arguments are not parsed one by one first (``Signature.apply``, a tenth of a commit):
        ``EVAL`` has no keys to look up or type-check, its one number is the exact text
        checked here, and nothing is written back but what the commands inside write (each
        through this method)."""
        native = _BY_SIGNATURE.get(sig)
        if native is not None:
            subs, psubs = self._server.subscribers, self._server.psubscribers
            if (
                not self._pubsub
                and self.server_type == "redis"
                and not (subs and any(subs.values()) or psubs and any(psubs.values()))
            ):
                result = native(self._db, args, self.version)
                if result is not FALLBACK:
                    COUNTS.native_commands += 1
                    return result
            return super()._run_command(func, sig, args, from_script)
        if (
            sig is not _EVAL
            or from_script
            or self._pubsub
            or len(args) < 2
            or (args[0], args[1]) not in _NATIVE
            or self.server_type != "redis"
        ):
            return super()._run_command(func, sig, args, from_script)
        self._subkey_events = []
        COUNTS.unparsed_evals += 1
        try:
            result = self.eval(args[0], int(args[1]), *args[2:])
        except SimpleError as exc:
            result = exc
        self._keyspace_notifications([], b"eval")
        self._subkey_notifications([])
        return result

    def eval(self, script: bytes, numkeys: int, *keys_and_args: bytes) -> Any:
        if script == _LOAD and numkeys == 2 and len(keys_and_args) == 4:
            return self._load(*keys_and_args)
        if script != _GUARDED or numkeys != 1 or len(keys_and_args) < 2:
            return super().eval(script, numkeys, *keys_and_args)
        COUNTS.native_evals += 1
        key, token, *rest = keys_and_args
        if self._call([b"GET", key]) != token:
            return 0
        i = 0
        while i < len(rest):
            n = int(rest[i])
            self._call(list(rest[i + 1 : i + 1 + n]))
            i += n + 1
        return 1

    def _load(self, alias: bytes, own: bytes, prefix: bytes, ttl: bytes) -> list[Any]:
        """``alias_scripts.LOAD``: the memory an identity's alias points to (every answered
        message reads it), with the link kept alive; the same commands, in the same order."""
        COUNTS.native_evals += 1
        person = self._call([b"GET", alias])
        if person is None:
            return [b"", self._call([b"GET", own])]
        if int(ttl) > 0:
            self._call([b"EXPIRE", alias, ttl])
            self._call([b"EXPIRE", prefix + person + b":members", ttl])
            self._call([b"EXPIRE", prefix + person + b":memory", ttl])
        return [person, self._call([b"GET", prefix + person + b":memory"])]

    def _resolve(self, fields: list[bytes]) -> tuple[Any, Any, list[bytes]]:
        """A command's method, signature and arguments; a name is decoded and looked up
        (``_name_to_func``) once per socket, except a command with subcommands."""
        found = self._found.get(fields[0])
        if found is not None:
            return (*found, fields[1:])
        cmd, args = extract_command(fields)
        found = self._name_to_func(cmd)
        if cmd not in COMMANDS_WITH_SUB:
            self._found[fields[0]] = found
        return (*found, args)

    def _call(self, fields: list[bytes]) -> Any:
        """One command as ``redis.call`` runs it: an error aborts (what ran before stays)."""
        func, sig, args = self._resolve(fields)
        result = self._run_command(func, sig, args, True)
        if isinstance(result, SimpleError):
            raise result
        return result


class _Connection(FakeAsyncRedisConnection):
    def pack_command(self, *args: Any) -> list[Any]:
        """redis-py's own, minus RESP: a multi-word name (``CLIENT SETINFO``) still splits."""
        if isinstance(args[0], str):
            args = (*args[0].encode().split(), *args[1:])
        elif b" " in args[0]:
            args = (*args[0].split(), *args[1:])
        return [_Fields(map(self.encoder.encode, args))]

    def pack_commands(self, commands: Any) -> list[Any]:
        return [self.pack_command(*command)[0] for command in commands]

    async def _connect(self) -> None:  # fakeredis's own, with the socket above
        if self._server is None or not self._server.connected:
            raise self._connection_error_class(msgs.CONNECTION_ERROR_MSG)
        self._sock = _Socket(
            self._server,
            self.db,
            client_class=self._client_class,
            lua_modules=self._lua_modules,
            client_info=self._client_info,
        )
        self._reader = FakeReader(self._sock)
        self._writer = FakeWriter(self._sock)


def client(server: fakeredis.FakeServer, db: int) -> Redis:
    """A client of ``server``'s database ``db`` whose guarded commits run natively and whose
    plain commands and pipelines take the direct path (``bot.state.embedded_direct``)."""
    # No socket timeout: a write is a synchronous call into the store, and with a timeout
    # redis-py wraps every one in ``asyncio.wait_for`` (a task per command). Reads wait for the
    # store's reply as before (a blocking command's own timeout is the store's business).
    return Client(
        server=server,
        db=db,
        decode_responses=True,
        connection_class=_Connection,
        connection_pool_class=Pool,
        socket_timeout=None,
    )
