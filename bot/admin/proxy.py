"""Who the client really is behind a trusted reverse proxy (``CHORUS_ADMIN_TRUST_PROXY``).

Why only from listed proxies: ``X-Forwarded-For`` and ``X-Forwarded-Proto`` are headers anyone
can send, so believing them from any peer would let a guesser pick a fresh address for each
try (escaping the login limit) or blame someone else's. From a peer in the list, the client is
the rightmost ``X-Forwarded-For`` hop that is not itself a listed proxy (each proxy appends the
address it saw, so the hops right of the client are trusted ones); a hop that is no address
stops the walk at the proxy that sent it. The request is then handled as if it came from that
client (the login limit counts per real client, the audit names it), and over https when a
listed proxy says the client used https (the session cookie is marked ``Secure``). With no
list, or from any other peer, the headers are ignored: the peer is the client.
"""

from __future__ import annotations

from collections.abc import Iterable
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

from aiohttp import web

from bot.admin.auth import Handler, Middleware

Address = IPv4Address | IPv6Address


class Proxies:
    """The trusted proxies and what a request through them says about its client."""

    def __init__(self, networks: Iterable[str] = ()) -> None:
        self.networks: tuple[IPv4Network | IPv6Network, ...] = tuple(
            ip_network(n, strict=False) for n in networks
        )

    def __bool__(self) -> bool:
        return bool(self.networks)

    def trusted(self, address: Address | None) -> bool:
        if address is None:
            return False
        if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        return any(address in network for network in self.networks)

    def client(self, request: web.Request) -> tuple[str | None, bool]:
        """The client's address and whether it used https, as far as can be believed."""
        peer = _address(request.remote or "")
        if not self.trusted(peer):
            return request.remote, request.secure
        client = peer
        hops = ",".join(request.headers.getall("X-Forwarded-For", [])).split(",")
        for hop in reversed(hops):
            found = _address(hop)
            if found is None:
                break
            client = found
            if not self.trusted(found):
                break
        protos = ",".join(request.headers.getall("X-Forwarded-Proto", [])).split(",")
        secure = request.secure or any(p.strip().lower() == "https" for p in protos)
        return str(client), secure

    def middleware(self) -> Middleware:
        @web.middleware
        async def forwarded(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not self:
                return await handler(request)
            remote, secure = self.client(request)
            if remote is None or (remote == request.remote and secure == request.secure):
                return await handler(request)
            scheme = "https" if secure else request.scheme
            return await handler(request.clone(remote=remote, scheme=scheme))

        return forwarded


def _address(text: str) -> Address | None:
    """An address as a hop or a peer gives it (``1.2.3.4``, ``1.2.3.4:5678``, ``[::1]:80``,
    ``::1``); None for anything else (``unknown``, a name, nothing)."""
    text = text.strip()
    if text.startswith("["):
        text = text[1:].partition("]")[0]
    elif text.count(":") == 1:
        text = text.partition(":")[0]
    try:
        return ip_address(text)
    except ValueError:
        return None
