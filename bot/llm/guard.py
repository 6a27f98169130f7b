"""A module-level switch that makes any real vendor call in tests fail loudly.

Tests (and the subprocesses they start) set ``CHORUS_BLOCK_REAL_LLM=1``; every provider calls
``check_endpoint`` before each request. Loopback addresses stay allowed so the real SDKs can run
against the wire-format servers in ``tests/loopback``.
"""

from __future__ import annotations

import ipaddress
import os
from urllib.parse import urlsplit

from bot.llm.errors import RealVendorCallBlocked

_blocked = os.environ.get("CHORUS_BLOCK_REAL_LLM", "").lower() in {"1", "true", "yes"}


def block_real_calls() -> None:
    global _blocked
    _blocked = True


def allow_real_calls() -> None:
    global _blocked
    _blocked = False


def real_calls_blocked() -> bool:
    return _blocked


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_endpoint(provider: str, base_url: str | None) -> None:
    """Refuse a request to anything but loopback while real calls are blocked."""
    if not _blocked:
        return
    host = urlsplit(base_url or "").hostname or ""
    if not _is_loopback(host):
        raise RealVendorCallBlocked(
            f"a test tried to call the real {provider} API at {base_url or '(default URL)'}; "
            "point the provider at a loopback server (tests/loopback) instead"
        )
