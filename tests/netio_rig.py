"""What the ``bot.llm.netio`` tests share: counting the connections the backend opens."""

from __future__ import annotations

from typing import Any

import pytest

from bot.llm import netio


class Counted:
    """Counts the connections ``AsyncioBackend`` opens, and fails any the stock backend opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.connects = 0
        real = netio.AsyncioBackend.connect_tcp

        async def counted(backend: netio.AsyncioBackend, *args: Any, **kwargs: Any) -> Any:
            self.connects += 1
            return await real(backend, *args, **kwargs)

        async def stock(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("httpx2's stock network backend opened a connection")

        monkeypatch.setattr(netio.AsyncioBackend, "connect_tcp", counted)
        monkeypatch.setattr("httpcore2._backends.anyio.AnyIOBackend.connect_tcp", stock)
