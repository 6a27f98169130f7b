"""Redis stopped for 10 s under load: no process exits, readiness tracks it, every message is
answered exactly once afterwards (docs/architecture.md, "Failure semantics").

Real parts only: a private ``redis-server`` with an fsync-always AOF (as deploy/compose.yaml
runs it), killed with SIGKILL mid-run and restarted on the same port 10 s later; a
``chorus run --role gateway`` process on Slack's HTTP Events API (bolt and slack-sdk against a
loopback Slack here), two ``chorus run --role worker`` processes and one ``chorus insights``
process, exactly as deployed, answering through the official Anthropic SDK against a loopback
server here. Signed Slack events go to the gateway before and during the outage (Slack wants
its ack within 3 s, outage or not); a bigger load of console messages is published straight
onto the bus, as a gateway does (``RedisStreamsBus.publish``, which waits out the outage).

Waiting: readiness and unreadiness are read off each process's /readyz (another process's
state: polled every 100 ms); replies are followed with ``XREAD BLOCK``; the end is the bus's
drain plus one reply per message. The rig (processes, Slack signing, settings) is shared with
``test_outbox_e2e`` (the gateway's order and shutdown through an outage) in ``outage_rig``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from bot.bus.streams import FIELD, RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply
from bot.state import connect, keys
from tests import outage_rig
from tests.loopback.slack_server import BOT_USER_ID, SlackServer
from tests.outage_rig import (
    AOF,
    SLACK_TOKEN,
    Fleet,
    SlowAnthropic,
    chorus_env,
    post_event,
    sample,
    slack_gateway_env,
    until_listening,
)
from tests.redis_server import free_port, start_redis, stop_redis

pytestmark = pytest.mark.e2e  # every test here starts processes

OUTAGE_SECONDS = 10.0
CONVERSATIONS = 12
BEFORE, DURING = 60, 60  # messages published before the kill, and while Redis is down
PARTITIONS = 16  # the app's default
SLACK_CHANNELS, SLACK_EACH = 6, 2  # events per channel, before and again during the outage


def _model(body: dict[str, Any]) -> str:
    if "output_config" in body:  # the insights agent's structured call
        return json.dumps({"pins": [], "recommendations": []})
    return "noted"


@pytest.fixture
def redis_binary() -> str:
    return outage_rig.redis_binary()


@pytest.fixture
async def model() -> AsyncIterator[SlowAnthropic]:
    async with SlowAnthropic() as server:
        server.default_reply = _model
        yield server


@pytest.fixture
async def slack() -> AsyncIterator[SlackServer]:
    async with SlackServer(bot_token=SLACK_TOKEN) as server:
        yield server


def _mention(n: int) -> dict[str, Any]:
    """The n-th app_mention, in one of ``SLACK_CHANNELS`` channels, with its own ts."""
    ts = f"{1_700_000_000 + n}.000100"
    return {
        "type": "event_callback",
        "team_id": "T111",
        "api_app_id": "A111",
        "event_id": f"Ev{n:05d}",
        "event_time": 1_700_000_000 + n,
        "authed_users": [BOT_USER_ID],
        "event": {
            "type": "app_mention",
            "text": f"<@{BOT_USER_ID}> question {n}",
            "user": f"W{n % 4}",
            "ts": ts,
            "event_ts": ts,
            "team": "T111",
            "channel": f"C{n % SLACK_CHANNELS}",
        },
    }


async def test_a_10s_redis_outage_loses_and_doubles_nothing_and_nothing_exits(
    redis_binary: str, tmp_path: Path, model: SlowAnthropic, slack: SlackServer, key_tag: str
) -> None:
    port = free_port()
    data = tmp_path / "redis"
    data.mkdir()
    server = await asyncio.to_thread(start_redis, redis_binary, port, data, *AOF)
    url = f"redis://127.0.0.1:{port}/0"
    env = chorus_env(url, key_tag, model.base_url, tmp_path / "spool")
    fleet = Fleet(env, tmp_path)
    client = await connect.open_redis(url)
    publisher = RedisStreamsBus(client, consumer="gateway", namespace=key_tag, backoff_cap=0.5)
    convs = [ConversationKey(platform="console", channel=f"c{n}") for n in range(CONVERSATIONS)]
    sent: list[ChatMessage] = []

    async def publish(first: int, count: int) -> None:
        for n in range(first, first + count):
            conv = convs[n % CONVERSATIONS]
            message = ChatMessage(
                platform="console",
                id=f"{key_tag}-{n}",
                conversation=conv,
                author=Author(id=f"user{n % 5}", display_name="Chatter"),
                text=f"message {n}",
                is_direct=True,
            )
            sent.append(message)
            await publisher.publish(INBOUND, message)

    try:
        slack_port = free_port()
        fleet.env_for["gateway"] = slack_gateway_env(slack, slack_port)
        events_url = f"http://127.0.0.1:{slack_port}/slack/events"
        fleet.start("gateway", "run", "--role", "gateway")
        fleet.start("worker1", "run", "--role", "worker")
        fleet.start("worker2", "run", "--role", "worker")
        fleet.start("insights", "insights")
        async with aiohttp.ClientSession() as session:
            await asyncio.wait_for(fleet.until_ready(session, True), 60)
            await asyncio.wait_for(until_listening(session, slack_port), 30)
            events = SLACK_CHANNELS * SLACK_EACH
            for n in range(events):
                assert await post_event(session, events_url, _mention(n)) == 200
            await publish(0, BEFORE)
            await asyncio.wait_for(_until_replies(client, key_tag, BEFORE // 3), 30)

            os.kill(server.pid, signal.SIGKILL)  # a crash, not a clean shutdown
            await asyncio.to_thread(server.wait)
            down_at = time.monotonic()
            during = asyncio.create_task(publish(BEFORE, DURING))  # waits for Redis
            for n in range(events, 2 * events):  # acknowledged in time, Redis or not
                assert await post_event(session, events_url, _mention(n)) == 200
            await asyncio.wait_for(fleet.until_ready(session, False), OUTAGE_SECONDS)
            for name in fleet.procs:  # alive, and still scrapeable without Redis
                assert await fleet.status(session, name, "/healthz") == 200, name
                assert await fleet.status(session, name, "/metrics") == 200, name
            await asyncio.sleep(max(0.0, OUTAGE_SECONDS - (time.monotonic() - down_at)))
            assert not fleet.exited(), f"exited during the outage: {fleet.exited()}"
            assert not during.done(), "publishing waits while Redis is down"

            server = await asyncio.to_thread(start_redis, redis_binary, port, data, *AOF)
            await asyncio.wait_for(during, 30)
            await asyncio.wait_for(fleet.until_ready(session, True), 30)
            await publisher.drain(timeout=60)  # every inbound entry acked by the workers
            await asyncio.wait_for(_until_replies(client, key_tag, BEFORE + DURING), 30)
            # as long as the replies above may take: the posts follow them on a loaded machine
            await slack.wait_for(lambda: len(slack.posts) >= 2 * events, limit=30)
            replies = await _replies(client, key_tag)
            # the insights jobs run after their debounce and poll, on their own clock
            await asyncio.wait_for(_until_insights_ran(fleet, session), 60)
            metrics = {name: await fleet.metrics(session, name) for name in fleet.procs}
            assert not fleet.exited(), f"exited after the outage: {fleet.exited()}"
    except BaseException:
        print(fleet.tails())
        raise
    finally:
        await publisher.close()
        await client.aclose()
        await asyncio.to_thread(fleet.stop)
        await asyncio.to_thread(stop_redis, server)

    by_message = Counter(r.reply_to_id for r in replies)
    assert set(by_message) == {m.id for m in sent}, "a message went unanswered"
    assert [m for m, n in by_message.items() if n > 1] == [], "a message was answered twice"
    assert [r.text for r in replies if r.is_error] == [], "nobody saw an apology for the outage"
    for conv in convs:
        expected = [m.id for m in sent if m.conversation == conv]
        assert [r.reply_to_id for r in replies if r.conversation == conv] == expected, conv
    threads = Counter(post["thread_ts"] for post in slack.posts)
    assert set(threads) == {_mention(n)["event"]["ts"] for n in range(2 * events)}
    assert [ts for ts, n in threads.items() if n > 1] == [], "a Slack event was answered twice"
    assert all(post["text"] == "noted" for post in slack.posts), "no apology on Slack either"
    answered = sum(
        sample(metrics[w], "chorus_messages_out_total", 'platform="console"')
        for w in ("worker1", "worker2")
    )
    assert answered >= BEFORE + DURING  # (a message answered by one worker counts once there)
    assert sample(metrics["insights"], "chorus_insights_jobs_total", 'outcome="unchanged"') > 0


async def _until_insights_ran(fleet: Fleet, session: aiohttp.ClientSession) -> None:
    """Scrape the insights process until it counts a finished job (it answers "unchanged")."""
    while True:
        text = await fleet.metrics(session, "insights")
        if sample(text, "chorus_insights_jobs_total", 'outcome="unchanged"') > 0:
            return
        await asyncio.sleep(0.2)  # the next scrape: the count lives in another process


async def _until_replies(client: Any, tag: str, count: int) -> None:
    """Follow the outbound streams with ``XREAD BLOCK`` until ``count`` replies are out."""
    cursors = {keys.bus_stream(outbound_topic("console"), p, tag): "0-0" for p in range(PARTITIONS)}
    seen = 0
    while seen < count:
        for stream, entries in await client.xread(cursors, count=500, block=1000) or []:
            cursors[stream] = entries[-1][0]
            seen += len(entries)


async def _replies(client: Any, tag: str) -> list[Reply]:
    replies: list[Reply] = []
    for p in range(PARTITIONS):
        stream = keys.bus_stream(outbound_topic("console"), p, tag)
        for _, fields in await client.xrange(stream):
            replies.append(Reply.model_validate_json(fields[FIELD]))
    return replies
