"""The router writes the turn log as it decides: an answered message with its numbers inside the
commit, a failure (and any decision that commits nothing) with the next commit or the tick;
the conversation joins the activity index and its author the names index."""

from __future__ import annotations

import asyncio

import pytest

from bot.llm.errors import ProviderUnavailable
from bot.state import keys, turnlog
from tests.test_router import Rig, rig

__all__ = ["rig"]

pytestmark = pytest.mark.redis


async def logged(rig: Rig, count: int) -> list[turnlog.TurnRecord]:
    """The conversation's records once ``count`` are there (the tick flushes within a second)."""
    async with asyncio.timeout(30):
        while True:
            records = await turnlog.read_log(rig.redis, rig.conv)
            if len(records) >= count:
                return records
            await asyncio.sleep(0.05)


async def test_each_decision_is_logged_newest_first_with_its_numbers(rig: Rig) -> None:
    rig.provider.script.append(ProviderUnavailable("down", provider="x", status=503, attempts=5))
    await rig.say("hello", "m1")
    await rig.bus.drain(timeout=10)
    await rig.say("x" * 51, "m2")  # too long: a fixed answer, no model
    await rig.bus.drain(timeout=10)
    await rig.say("hello again", "m3")
    await rig.bus.drain(timeout=10)
    records = await logged(rig, 3)
    assert [(r.message_id, r.decision) for r in records] == [
        (f"m3-{rig.tag}", "answered"),
        (f"m2-{rig.tag}", "error"),
        (f"m1-{rig.tag}", "error"),
    ]
    answered, _, failed = records
    assert failed.reason == "ProviderUnavailable"
    assert answered.model == "m" and answered.latency_ms >= 0
    assert answered.user_id == "ada" and answered.user_name == "Ada"
    recent = await turnlog.recent(rig.redis, ["console"], limit=100_000)
    assert rig.conv in [conv for conv, _ in recent["console"]]
    found = await turnlog.find_people(rig.redis, "ada", platform="console", limit=100_000)
    assert ("ada", "console", "ada") in found
    await rig.redis.zrem(keys.recent_conversations("console"), str(rig.conv))
