"""The pinned resolver: the aiohttp resolver a fetch's session uses (``bot.tools.netguard``).

It answers only with the addresses ``NetGuard.vet`` passed for a host and refuses any host it
was not told about, so the socket connects to exactly what was checked (no DNS rebinding). Apart
from ``netguard`` because it subclasses aiohttp's resolver: aiohttp is imported when a page is
fetched, not with the tools, which every command builds (``chorus config`` and ``reload`` make
no request; a ``chat`` or ``run`` loads aiohttp anyway, through the vendor SDK).
"""

from __future__ import annotations

import ipaddress
import socket

from aiohttp.abc import AbstractResolver, ResolveResult

from bot.settings.allowlist import normalise_host


class PinnedResolver(AbstractResolver):
    """An aiohttp resolver that only knows the addresses ``NetGuard`` vetted (see module doc)."""

    def __init__(self) -> None:
        self._pinned: dict[str, list[str]] = {}

    def pin(self, host: str, addresses: list[str]) -> None:
        self._pinned[normalise_host(host)] = list(addresses)

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        addresses = self._pinned.get(normalise_host(host))
        if not addresses:
            raise OSError(f"{host} was not vetted by the network guard")
        results: list[ResolveResult] = []
        for text in addresses:
            ip = ipaddress.ip_address(text)
            fam = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
            if family not in (socket.AF_UNSPEC, fam):
                continue
            results.append(
                ResolveResult(
                    hostname=host,
                    host=text,
                    port=port,
                    family=fam,
                    proto=0,
                    flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                )
            )
        if not results:
            raise OSError(f"{host} has no vetted address of family {family!r}")
        return results

    async def close(self) -> None:
        self._pinned.clear()
