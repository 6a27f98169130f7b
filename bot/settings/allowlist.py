"""``CHORUS_FETCH_ALLOW`` (the chat's fetch tools) and ``CHORUS_KNOWLEDGE_FETCH_ALLOW`` (the
knowledge base's URLs): the exceptions to the private-address block.

Why in the settings layer: a bad entry must fail at start with the variable named, like any
other setting, and the settings import nothing above them. ``bot.tools.netguard`` applies it.
Why two lists: what an operator lets the knowledge base read (an internal wiki) must not become
what any chat user can have ``fetch_page`` read. Entries: ``name``, ``name:port``, ``1.2.3.4``, ``1.2.3.4:port``, ``10.0.0.0/8``, ``::1``,
``[::1]:port``, ``fd00::/8``.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOW_VARIABLE = "CHORUS_FETCH_ALLOW"
KNOWLEDGE_ALLOW_VARIABLE = "CHORUS_KNOWLEDGE_FETCH_ALLOW"


def normalise_host(host: str) -> str:
    """Lower case, without brackets or the trailing dot of a fully qualified name."""
    return host.strip().strip("[]").rstrip(".").lower()


@dataclass(frozen=True)
class Allowlist:
    """Exceptions to the private-address block. Parse with ``Allowlist.parse``."""

    hosts: frozenset[tuple[str, int | None]] = frozenset()
    networks: tuple[tuple[IPNetwork, int | None], ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str], variable: str = ALLOW_VARIABLE) -> Allowlist:
        """Entries: ``name``, ``name:port``, ``1.2.3.4``, ``1.2.3.4:port``, ``10.0.0.0/8``,
        ``::1``, ``[::1]:port``, ``fd00::/8``. A bad entry raises ``ValueError`` naming it and
        ``variable``."""
        hosts: set[tuple[str, int | None]] = set()
        networks: list[tuple[IPNetwork, int | None]] = []
        for raw in entries:
            entry = raw.strip()
            if not entry:
                continue
            host, port = _split_port(entry, variable)
            try:
                networks.append((ipaddress.ip_network(host, strict=False), port))
            except ValueError:
                if "/" in host or not host or any(c in host for c in " @?#"):
                    raise ValueError(
                        f"{variable}: {raw!r} is not a host, host:port, IP or CIDR block"
                    ) from None
                hosts.add((normalise_host(host), port))
        return cls(frozenset(hosts), tuple(networks))

    def allows_host(self, host: str, port: int) -> bool:
        name = normalise_host(host)
        return (name, None) in self.hosts or (name, port) in self.hosts

    def allows_address(self, address: IPAddress, port: int) -> bool:
        candidates = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
            candidates.append(address.ipv4_mapped)
        return any(
            ip.version == net.version and ip in net and allowed in (None, port)
            for ip in candidates
            for net, allowed in self.networks
        )


def _split_port(entry: str, variable: str) -> tuple[str, int | None]:
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        return host, _port(rest.removeprefix(":"), entry, variable) if rest else None
    if entry.count(":") == 1:  # name:port or v4:port (a bare IPv6 address has several colons)
        host, _, port = entry.partition(":")
        return host, _port(port, entry, variable)
    return entry, None


def _port(text: str, entry: str, variable: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{variable}: {entry!r} has an invalid port")
    return int(text)
