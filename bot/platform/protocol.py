"""What a platform adapter is, to the composition root (``bot/cli.py``).

An adapter converts and does I/O, nothing else (docs/architecture.md): it publishes every inbound
``ChatMessage`` to the ``inbound`` topic and ``MessageDeleted`` to ``deletions``, consumes
``outbound:<platform>`` and sends each ``Reply`` through its platform's one rate-limited
chokepoint, and reconnects with backoff when its connection drops. The router, the agent and
the commands never know which platform a message came from.
"""

from __future__ import annotations

from typing import Protocol


class PlatformAdapter(Protocol):
    platform: str

    async def run(self) -> None:
        """Connect, listen and send until ``aclose``; reconnect on drops."""

    async def aclose(self) -> None:
        """Disconnect and release everything the adapter created."""
