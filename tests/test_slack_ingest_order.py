"""The Slack adapter hands a channel's events to the bus in the order Slack delivered them, and
does not drop an event Slack already got its HTTP 200 for when it closes (the gateway's outbox
then holds or spools it; see ``test_outbox``).

Why these need their own tests: each event is converted in a task of its own after the ack, and
the first event of a user waits for ``users.info``, so a later event of a user already looked up
could overtake it; and ``aclose`` used to cancel those tasks outright. Real bolt and slack-sdk
against the loopback Slack (``tests/slack_rig.py``), whose ``users.info`` is held for one user.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from adapters.slack.adapter import SlackAdapter, build_client
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND
from bot.events import ChatMessage
from tests.loopback.slack_server import SlackServer
from tests.slack_rig import BOT_TOKEN, FakeTime, Rig, mention, running_rig, slack_settings


class HeldLookups(SlackServer):
    """``users.info`` of ``held_user`` waits until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__(bot_token=BOT_TOKEN)
        self.held_user = "USLOW"
        self.release = asyncio.Event()
        self.waiting = asyncio.Event()

    async def _users_info(self, request: web.Request) -> web.Response:
        if request.query.get("user") == self.held_user or self.held_user in (await request.text()):
            self.waiting.set()
            await self.release.wait()
        return await super()._users_info(request)


@pytest.fixture
async def server() -> AsyncIterator[HeldLookups]:
    async with HeldLookups() as srv:
        assert isinstance(srv, HeldLookups)
        yield srv


@pytest.fixture
async def rig(server: HeldLookups) -> AsyncIterator[Rig]:
    async for value in running_rig(server):
        yield value


def event_by(user: str, n: int, channel: str = "C111") -> dict[str, Any]:
    body = mention(event_id=f"Ev{n}", text=f"message {n}")
    body["event"].update(user=user, ts=f"1700000{n:03d}.000100", channel=channel)
    body["event"].pop("thread_ts", None)
    return body


async def test_a_later_event_of_a_channel_waits_for_an_earlier_one_still_looking_up(
    rig: Rig, server: HeldLookups
) -> None:
    assert (await rig.post(event_by("UFAST", 0)))[0] == 200
    await rig.settle()  # UFAST is looked up and cached
    assert (await rig.post(event_by("USLOW", 1)))[0] == 200
    await asyncio.wait_for(server.waiting.wait(), 5)
    assert (await rig.post(event_by("UFAST", 2)))[0] == 200  # needs no lookup
    assert (await rig.post(event_by("UFAST", 3, channel="C222")))[0] == 200
    await server.wait_for(lambda: len(server.posts) == 2)  # each answered by the stand-in
    assert [m.text for m in rig.seen] == ["message 0", "message 3"], "another channel goes on"
    server.release.set()
    await rig.settle()
    assert [m.text for m in rig.seen] == ["message 0", "message 3", "message 1", "message 2"]


async def test_close_lets_acknowledged_events_reach_the_bus(server: HeldLookups) -> None:
    settings = slack_settings(server)
    bus = InProcessBus()  # no router: what reached the bus stays there to be read
    adapter = SlackAdapter(bus, settings, client=build_client(settings))
    rig = Rig(server=server, bus=bus, adapter=adapter, time=FakeTime())
    await adapter.start()
    try:
        assert (await rig.post(event_by("USLOW", 1)))[0] == 200  # Slack has its ack
        await asyncio.wait_for(server.waiting.wait(), 5)
        closing = asyncio.create_task(adapter.aclose())
        await asyncio.sleep(0)  # aclose has begun: intake stops, the event is still looking up
        server.release.set()
        await asyncio.wait_for(closing, 10)
        inbound = bus.consume(INBOUND, ChatMessage, group="agent")
        delivery = await asyncio.wait_for(anext(inbound), 5)
        assert delivery.event.text == "message 1"
    finally:
        await adapter.aclose()
        await bus.close()
