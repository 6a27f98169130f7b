"""The reloads of the configuration the dashboard asks of every process.

Why a counter: a reload carries no data (each process re-reads ``chorus.toml`` and ``.env``
itself, as on SIGHUP), so all a process must learn is that one was asked since it last looked.
The dashboard increments it; each process reads it once a second (one ``GET``), as workers
follow pauses, and reloads when it moved.
"""

from __future__ import annotations

from bot.state import keys
from bot.state.connect import Client

_ASKED_HERE: set[int] = set()  # counts this process asked for (it reloaded itself at once)


class ConfigReloads:
    def __init__(self, redis: Client) -> None:
        self.redis = redis

    async def ask(self) -> int:
        """Ask every process to reload; the new count."""
        count = int(await self.redis.incr(keys.config_reloads()))
        _ASKED_HERE.add(count)
        return count

    @staticmethod
    def asked_here(count: int) -> bool:
        """Whether this process asked for ``count`` itself (and so has reloaded already)."""
        return count in _ASKED_HERE

    async def count(self) -> int:
        found = await self.redis.get(keys.config_reloads())
        return int(found) if found else 0
