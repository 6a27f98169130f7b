"""The embedded store (``memory://``): fakeredis, with the claims' guarded commit run natively.

Why: every answered message commits through one Lua script (``bot.state.guarded.GUARDED``,
see ``bot.bus.claims``). Real Redis runs it in C; fakeredis runs it through its Lua engine
(``lupa``), which compiles the script on every call, collects Lua's garbage after it and
checks Lua's globals around every ``redis.call``: about a fifth of all the instructions of an
in-process turn. This socket recognises that one script (by its exact text) and does the same
in Python: it runs inside fakeredis's command dispatch, under the server's lock, so it is as
atomic as the script (nothing else runs between the token check and the commands), and each
command goes through fakeredis's own implementation, so the data is what the script would
have written. Any other script still runs through Lua. The claim contract tests run over both
stores (tests/test_claims.py, tests/test_bus_contract.py), so a difference would show there.

It reaches into fakeredis's socket internals (``_run_command``, ``_name_to_func``), which is
why fakeredis is pinned in constraints.txt; ``tests/test_embedded_store.py`` fails if a new
version stops taking this path.
"""

from __future__ import annotations

from typing import Any

import fakeredis
from fakeredis import _msgs as msgs
from fakeredis._clients._async import FakeAsyncRedisConnection, FakeReader, FakeWriter
from fakeredis._helpers import SimpleError
from fakeredis._socket import AsyncFakeSocket
from fakeredis._socket._resp import extract_command
from redis.asyncio import Redis

from bot.state.guarded import GUARDED

_GUARDED = GUARDED.encode()


class _Socket(AsyncFakeSocket):
    native_evals = 0  # how many guarded commits took the native path (tests read it)

    def eval(self, script: bytes, numkeys: int, *keys_and_args: bytes) -> Any:
        if script != _GUARDED or numkeys != 1 or len(keys_and_args) < 2:
            return super().eval(script, numkeys, *keys_and_args)
        type(self).native_evals += 1
        key, token, *rest = keys_and_args
        if self._call([b"GET", key]) != token:
            return 0
        i = 0
        while i < len(rest):
            n = int(rest[i])
            self._call(list(rest[i + 1 : i + 1 + n]))
            i += n + 1
        return 1

    def _call(self, fields: list[bytes]) -> Any:
        """One command as ``redis.call`` runs it: an error aborts (what ran before stays)."""
        cmd, args = extract_command(fields)
        func, sig = self._name_to_func(cmd)
        result = self._run_command(func, sig, args, True)
        if isinstance(result, SimpleError):
            raise result
        return result


class _Connection(FakeAsyncRedisConnection):
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
    """A client of ``server``'s database ``db`` whose guarded commits run natively."""
    return fakeredis.FakeAsyncRedis(
        server=server, db=db, decode_responses=True, connection_class=_Connection
    )
