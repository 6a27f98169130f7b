"""Build one platform's adapter the way ``chorus run`` does: the settings root loaded from the
environment and ``.env``, then the registry, which builds every configured platform."""

from __future__ import annotations

from typing import TypeVar

from redis.asyncio import Redis

from adapters.registry import build_adapters
from bot.bus.base import EventBus
from bot.settings import load_settings

A = TypeVar("A")


def adapter_from_env(cls: type[A], bus: EventBus, redis: Redis | None = None) -> A | None:
    """The ``cls`` adapter when its platform is configured, else None; ``ConfigError`` if bad."""
    built = build_adapters(load_settings(), bus, redis if redis is not None else Redis())
    found = [adapter for adapter in built if isinstance(adapter, cls)]
    assert len(found) == len(built), "only the platform under test may be configured"
    return found[0] if found else None
