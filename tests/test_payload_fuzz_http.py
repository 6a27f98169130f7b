"""Fuzzed platform payloads through the adapters' real HTTP entry points (property tests).

Slack: each recorded Events API body, mutated (``tests/payload_fuzz.py``: fields removed, nulled,
retyped, nested too), is signed and POSTed to the running adapter's endpoint, through the
ingress screen, bolt's request parsing, middleware and listeners, into our conversion. YouTube:
each recorded ``liveChatMessages.list`` response, mutated the same way, is what the loopback
Data API answers to the adapter's next poll, read by the poller and ``convert``.

The property, per example: nothing escapes (no ERROR log: no SDK "exception in handler", no
500, no task that died), the adapter logs and skips what it cannot read, and a well-formed
message right after is still converted and published. Deterministic and bounded
(``derandomize``, ``max_examples``): a few seconds per platform.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.events import ChatMessage
from bot.state import connect
from tests.loopback.slack_server import SlackServer
from tests.loopback.youtube_server import YouTubeServer, text_item
from tests.payload_fuzz import Held, Pick, apply, escapes, fixture, mutations
from tests.slack_rig import BOT_TOKEN, Rig, mention, running_rig
from tests.test_youtube_e2e import FakeTime
from tests.test_youtube_e2e import Rig as YouTubeRig

FUZZ = settings(
    derandomize=True,
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SLACK = (
    "slack_app_mention",
    "slack_app_mention_bolt_test",
    "slack_message",
    "slack_message_deleted",
    "slack_message_file_share",
    "slack_message_thread_broadcast",
    "slack_message_thread_reply",
    "slack_url_verification",
)
YOUTUBE = (
    "youtube_livechatmessages_list_response",
    "youtube_livechatmessages_list_text",
    "youtube_livechatmessages_list_superchat",
    "youtube_livechatmessages_list_newsponsor",
    "youtube_livechatmessages_list_stream_events",
)
_numbers = itertools.count(1)


# -- Slack -----------------------------------------------------------------------------------------
def slack_junk(name: str, picks: list[Pick], event_id: str) -> Any:
    """A recorded Events body, mutated; a fresh ``event_id`` first, or the adapter's dedupe
    drops it as Slack's retry of an event already seen."""
    body = fixture("slack", name)
    if "event_id" in body:
        body["event_id"] = event_id
    return apply(body, picks)


@pytest.fixture
async def slack_rig() -> AsyncIterator[Held[Rig]]:
    async with SlackServer(bot_token=BOT_TOKEN) as server:
        async for rig in running_rig(server):
            yield Held(rig)


@FUZZ
@given(name=st.sampled_from(SLACK), picks=mutations())
async def test_slack_events_endpoint_survives_mutated_bodies(
    slack_rig: Held[Rig], name: str, picks: list[Pick]
) -> None:
    slack, n = slack_rig.value, next(_numbers)
    junk = slack_junk(name, picks, f"EvFuzz{n}")
    with escapes() as caught:
        status, answer = await slack.post(junk)
        await slack.settle()
        assert status < 500, (status, answer, junk)
        sentinel = f"sentinel {n}"
        status, _ = await slack.post(mention(f"EvSentinel{n}", sentinel))
        await slack.settle()
    assert status == 200
    assert caught.take() == [], junk
    assert any(m.text == sentinel for m in slack.seen), junk


# -- YouTube ---------------------------------------------------------------------------------------
class Paced(FakeTime):
    """The e2e fake clock, but the poller only polls while the loopback has a page queued, so
    each example's pages are read exactly once and nothing spins in between."""

    server: YouTubeServer
    wake: asyncio.Event

    async def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)
        await asyncio.sleep(0)
        while not (self.server.pages or self.server.raw_lists):
            self.wake.clear()
            await self.wake.wait()


@pytest.fixture
async def youtube(
    key_tag: str,
) -> AsyncIterator[Held[tuple[YouTubeRig, Paced, asyncio.Task[None]]]]:
    async with YouTubeServer() as server:
        redis = await connect.open_redis(f"memory://yt-fuzz-{key_tag}")
        rig = YouTubeRig(server, redis, key_tag)
        rig.answer = lambda message: None
        paced = Paced(rig.bus)
        paced.server, paced.wake = server, asyncio.Event()
        rig.time = paced
        task = await rig.start(daily_quota=10_000_000)  # the quota is another test's concern
        try:
            yield Held((rig, paced, task))
        finally:
            await rig.close()
            await redis.aclose()


async def _until(predicate: Callable[[], bool], task: asyncio.Task[None]) -> None:
    async with asyncio.timeout(10):
        while not predicate():
            if task.done():
                task.result()
                raise AssertionError("the youtube adapter stopped")
            await asyncio.sleep(0.005)


@FUZZ
@given(name=st.sampled_from(YOUTUBE), picks=mutations())
async def test_youtube_poller_survives_mutated_list_responses(
    youtube: Held[tuple[YouTubeRig, Paced, asyncio.Task[None]]], name: str, picks: list[Pick]
) -> None:
    rig, paced, task = youtube.value
    n = next(_numbers)
    junk = apply(_fresh_ids(fixture("youtube", name), n), picks)
    sentinel = f"sentinel {n}"
    with escapes() as caught:
        rig.server.raw_lists.append(junk)
        rig.server.pages.append([text_item(f"LCC.sentinel-{n}", sentinel)])
        paced.wake.set()
        await _until(lambda: _said(rig.inbound, sentinel), task)
    assert caught.take() == [], junk
    assert not task.done()


def _fresh_ids(page: dict[str, Any], n: int) -> dict[str, Any]:
    """Item ids made unique per example (the adapter skips ids it has sent itself)."""
    for i, item in enumerate(page.get("items") or []):
        item["id"] = f"LCC.fuzz-{n}-{i}"
    return page


def _said(inbound: list[ChatMessage], text: str) -> bool:
    return any(message.text == text for message in inbound)
