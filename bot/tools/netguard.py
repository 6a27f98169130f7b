"""SSRF protection for tools that fetch URLs chosen by a model (and so, indirectly, by any user).

A chat user can ask the bot to "summarise http://169.254.169.254/latest/meta-data/" or a name
that resolves to an internal service. ``NetGuard.vet`` resolves the host (every A and AAAA
record) and refuses it when *any* address is loopback, private, link-local (including the cloud
metadata address), unspecified, multicast, reserved, CGNAT or otherwise not globally routable,
including IPv4-mapped / NAT64 / 6to4 IPv6 forms of those, and refuses well-known metadata host
names outright. ``CHORUS_FETCH_ALLOW`` (the knowledge base's guard: its own
``CHORUS_KNOWLEDGE_FETCH_ALLOW``) lists exceptions: host names, IP addresses, CIDR blocks, and
``host:port`` / ``ip:port`` / ``[v6]:port`` entries that permit a single port.

DNS rebinding: checking a name and then letting the HTTP client resolve it again would allow a
hostile DNS server to answer "8.8.8.8" to the check and "127.0.0.1" to the connection. So the
vetted addresses are *pinned*: ``bot.tools.pinned.PinnedResolver`` is the aiohttp resolver for
the session and answers only with the addresses that passed the check (and refuses any host it
was not told about), so the socket connects to exactly what was checked. IP-literal URLs never
reach a resolver; they are checked directly. (It lives apart because it subclasses aiohttp's
resolver: this module is imported with the tools at every start, aiohttp only once a page is
fetched.)
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from yarl import URL

from bot.settings.allowlist import ALLOW_VARIABLE, Allowlist, IPAddress, normalise_host
from bot.tools.base import ToolError

Resolve = Callable[[str, int], Awaitable[list[str]]]
"""``(host, port) -> IP address strings``; injectable so tests can fake DNS."""

METADATA_HOSTS = frozenset(
    {
        "metadata",
        "metadata.google.internal",
        "metadata.goog",
        "metadata.azure.internal",
        "instance-data",
        "instance-data.ec2.internal",
        "metadata.tencentyun.com",
        "metadata.packet.net",
    }
)

_CGNAT = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def classify(address: IPAddress) -> str | None:
    """Why an address must not be fetched (``"a private address"``...), or None if it is public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is not None:
            reason = classify(embedded)
            return f"{reason} (embedded in an IPv6 address)" if reason else None
    checks = (
        (address.is_unspecified, "an unspecified address"),
        (address.is_loopback, "a loopback address"),
        (address.is_link_local, "a link-local address (cloud metadata lives here)"),
        (address in _CGNAT, "a carrier-grade NAT (shared) address"),
        (address.is_multicast, "a multicast address"),
        (address.is_private, "a private address"),
        (address.is_reserved, "a reserved address"),
        (not address.is_global, "not a globally routable address"),
    )
    return next((reason for hit, reason in checks if hit), None)


async def system_resolve(host: str, port: int) -> list[str]:
    """Every address (A and AAAA) the system resolver returns for ``host``, in its order."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


@dataclass
class NetGuard:
    """Decides whether a URL may be fetched and which addresses the connection may use."""

    allow: Allowlist = field(default_factory=Allowlist)
    resolve: Resolve = system_resolve
    variable: str = ALLOW_VARIABLE  # the setting a refusal names (the allow list's)

    async def vet(self, url: URL) -> list[str]:
        """The addresses to connect to for ``url``; raises ``ToolError`` explaining a refusal."""
        if url.scheme not in ("http", "https"):
            raise ToolError(
                f"only http and https URLs can be fetched, not {url.scheme or 'none'!r}"
            )
        raw = url.raw_host
        port = url.port
        if not raw or port is None:
            raise ToolError(f"{url} has no host")
        host = normalise_host(raw)
        trusted_name = self.allow.allows_host(host, port)
        literal = _parse_ip(host)
        if literal is not None:
            self._check_address(host, literal, port, trusted_name, literal=True)
            return [str(literal)]
        if host in METADATA_HOSTS and not trusted_name:
            raise ToolError(
                f"refused: {host} is a cloud metadata service (set {self.variable} to permit it)"
            )
        try:
            found = await self.resolve(host, port)
        except OSError as exc:
            raise ToolError(f"could not resolve {host}: {exc.strerror or exc}") from None
        addresses = [a for a in (_parse_ip(text) for text in found) if a is not None]
        if not addresses:
            raise ToolError(f"could not resolve {host}: no addresses")
        for address in addresses:
            self._check_address(host, address, port, trusted_name, literal=False)
        return [str(a) for a in addresses]

    def _check_address(
        self, host: str, address: IPAddress, port: int, trusted_name: bool, *, literal: bool
    ) -> None:
        reason = classify(address)
        if reason is None or trusted_name or self.allow.allows_address(address, port):
            return
        subject = f"{host} is" if literal else f"{host} resolves to {address},"
        raise ToolError(f"refused: {subject} {reason} (set {self.variable} to permit it)")


def _parse_ip(text: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
