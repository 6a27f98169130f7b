"""What the ``bot.llm.netio`` and ``bot.llm.http1`` tests share: counting the connections the
SDKs' transport opens."""

from __future__ import annotations

from typing import Any

import pytest

from bot.llm import netio


class Counted:
    """Counts the connections ``netio.connect`` opens, and fails any that httpx2's stock
    transport (httpcore2 on anyio) opens."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.connects = 0
        real = netio.connect

        async def counted(*args: Any, **kwargs: Any) -> netio.Wire:
            self.connects += 1
            return await real(*args, **kwargs)

        async def stock(*args: Any, **kwargs: Any) -> Any:
            raise AssertionError("httpx2's stock network backend opened a connection")

        monkeypatch.setattr(netio, "connect", counted)
        monkeypatch.setattr("httpcore2._backends.anyio.AnyIOBackend.connect_tcp", stock)
