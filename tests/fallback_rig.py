"""What the fallback chain's tests share (tests/test_fallback.py and
test_fallback_stream.py): scripted providers that fail on cue, a recorder, and a request.
"""

from __future__ import annotations

from typing import Any

from bot.llm.errors import ProviderUnavailable
from bot.llm.scripted import Script, ScriptedProvider
from bot.llm.types import (
    LLMRequest,
    Message,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def vendor(name: str, script: list[Script] | None = None) -> ScriptedProvider:
    """A scripted provider that calls itself ``name`` (the chain labels targets by it)."""
    cls = type(f"{name.title()}Scripted", (ScriptedProvider,), {"name": name})
    provider: ScriptedProvider = cls(script or [])
    return provider


def down(name: str = "x") -> ProviderUnavailable:
    return ProviderUnavailable(f"{name} overloaded", provider=name, status=529, attempts=5)


def request(model: str = "primary-model", **extra: Any) -> LLMRequest:
    return LLMRequest(model=model, messages=(Message.user("hi"),), **extra)


class Recorder:
    def __init__(self) -> None:
        self.moves: list[tuple[str, str]] = []

    def __call__(self, from_model: str, to_model: str) -> None:
        self.moves.append((from_model, to_model))
