"""The gateway's order and shutdown through a Redis outage, with real processes (issue 13's
"Done when"): every Slack message answered exactly once and, per conversation, in the order
Slack got its HTTP 200, after a 10 s and a 90 s outage; and a gateway stopped (SIGTERM) during
the outage exits 0 promptly, spools what it acknowledged, and a new gateway answers all of it.

Real parts only (``outage_rig``): a private ``redis-server`` with an fsync-always AOF, killed
with SIGKILL and restarted on the same port; ``chorus run --role gateway`` on Slack's HTTP
Events API (bolt and slack-sdk against the loopback Slack), three ``chorus run --role worker``
processes answering through the official Anthropic SDK against a loopback model that names the
question it answers (``re q-<conversation>-<n>``). Twenty DM conversations get their messages
one after another (the next once Slack has its 200), all conversations at once.

Waiting is on the loopback Slack's posts (a condition notified per request) and on Redis'
view of the inbound groups (another process's state: polled). The time from Redis' return to
each backlog answer is printed (``-s``) as ``backlog answered``: p50 and max.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import statistics
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from bot.state import connect
from tests import outage_rig
from tests.loopback.base import Recorded
from tests.loopback.slack_server import BOT_USER_ID, SlackServer
from tests.outage_rig import (
    AOF,
    SLACK_TOKEN,
    Fleet,
    SlowAnthropic,
    chorus_env,
    post_event,
    sample,
    until_listening,
)
from tests.redis_server import free_port, start_redis, stop_redis

CONVERSATIONS = 20
PARTITIONS = 16  # the app's default
QUESTION = re.compile(r"q-(\d+)-(\d+)")
LIMIT = 120.0  # seconds for the backlog to be answered once Redis is back: generous


class TimedSlack(SlackServer):
    """Records when each ``chat.postMessage`` arrived (monotonic), with what it answers."""

    def __init__(self) -> None:
        super().__init__(bot_token=SLACK_TOKEN)
        self.answered: list[tuple[float, int, int]] = []  # (when, conversation, n)

    async def _record(self, request: web.Request) -> Recorded:
        rec = await super()._record(request)
        if rec.path == "/api/chat.postMessage" and isinstance(rec.body, dict):
            found = QUESTION.findall(str(rec.body.get("text", "")))
            if found:
                conversation, n = found[-1]
                self.answered.append((time.monotonic(), int(conversation), int(n)))
        return rec


def _answer(body: dict[str, Any]) -> str:
    """The question id in the newest user message (older ones are the history)."""
    users = [m for m in body.get("messages", []) if m.get("role") == "user"]
    last: dict[str, Any] = users[-1] if users else {}
    content = last.get("content", "")
    text = content if isinstance(content, str) else str(content)
    found = QUESTION.findall(text)
    return f"re q-{found[-1][0]}-{found[-1][1]}" if found else "noted"


@pytest.fixture
async def model() -> AsyncIterator[SlowAnthropic]:
    async with SlowAnthropic() as server:
        server.default_reply = _answer
        yield server


@pytest.fixture
async def slack() -> AsyncIterator[TimedSlack]:
    async with TimedSlack() as server:
        assert isinstance(server, TimedSlack)
        yield server


def _dm(conversation: int, n: int) -> dict[str, Any]:
    """Message ``n`` of DM conversation ``conversation``, as Slack's Events API sends it."""
    ts = f"{1_700_000_000 + conversation * 100 + n}.000200"
    return {
        "type": "event_callback",
        "team_id": "T111",
        "api_app_id": "A111",
        "event_id": f"Ev{conversation:03d}{n:03d}",
        "event_time": 1_700_000_000,
        "authed_users": [BOT_USER_ID],
        "event": {
            "type": "message",
            "channel_type": "im",
            "text": f"question q-{conversation}-{n}",
            "user": f"W{conversation:03d}",
            "ts": ts,
            "event_ts": ts,
            "team": "T111",
            "channel": f"D{conversation:03d}",
        },
    }


class Deployment:
    """Redis, the fleet and the Slack side of one test."""

    def __init__(self, tmp_path: Path, model: SlowAnthropic, slack: TimedSlack, tag: str) -> None:
        self.binary = outage_rig.redis_binary()
        self.port, self.data, self.tag = free_port(), tmp_path / "redis", tag
        self.data.mkdir()
        self.spool = tmp_path / "spool"
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.fleet = Fleet(chorus_env(self.url, tag, model.base_url, self.spool), tmp_path)
        self.slack = slack
        self.slack_port = free_port()
        self.accepted: dict[int, list[int]] = {c: [] for c in range(CONVERSATIONS)}
        self.server = start_redis(self.binary, self.port, self.data, *AOF)

    async def start(self, session: aiohttp.ClientSession, gateway: str) -> None:
        """The gateway ``gateway`` and three workers, once every one is ready."""
        self.start_gateway(gateway)
        for n in (1, 2, 3):
            self.fleet.start(f"worker{n}", "run", "--role", "worker")
        await asyncio.wait_for(self.fleet.until_ready(session, True), 60)
        await asyncio.wait_for(until_listening(session, self.slack_port), 30)

    def start_gateway(self, name: str) -> None:
        self.fleet.env_for[name] = outage_rig.slack_gateway_env(self.slack, self.slack_port)
        self.fleet.start(name, "run", "--role", "gateway")

    async def send(self, session: aiohttp.ClientSession, numbers: range) -> None:
        """Each conversation's messages ``numbers``, one after the other (the next once Slack
        has its 200), every conversation at once."""
        url = f"http://127.0.0.1:{self.slack_port}/slack/events"

        async def one(conversation: int) -> None:
            for n in numbers:
                assert await post_event(session, url, _dm(conversation, n)) == 200
                self.accepted[conversation].append(n)

        await asyncio.gather(*(one(c) for c in range(CONVERSATIONS)))

    def kill_redis(self) -> None:
        os.kill(self.server.pid, signal.SIGKILL)  # a crash, not a clean shutdown
        self.server.wait()

    def restart_redis(self) -> float:
        self.server = start_redis(self.binary, self.port, self.data, *AOF)
        return time.monotonic()

    async def until_answered(self, count: int, limit: float = LIMIT) -> None:
        """Until ``count`` different messages are answered (a second answer does not count)."""
        await self.slack.wait_for(
            lambda: len({(c, n) for _, c, n in self.slack.answered}) >= count, limit=limit
        )

    async def until_drained(self) -> None:
        """Every inbound entry acked by the workers and every reply by the gateway (so no late
        second answer or post is on its way)."""
        client = await connect.open_redis(self.url)
        try:
            await outage_rig.until_drained(client, self.tag, "slack", PARTITIONS)
        finally:
            await client.aclose()

    async def until_metric(self, session: aiohttp.ClientSession, name: str, value: float) -> None:
        """Until the gateway's /metrics shows ``value`` for ``name`` (another process: polled)."""
        while True:
            if sample(await self.fleet.metrics(session, "gateway"), name) == value:
                return
            await asyncio.sleep(0.1)

    def check(self) -> None:
        """Exactly once, and per conversation in the order Slack accepted the events. (Run
        after the fleet stopped; on failure the processes' logs are printed.)"""
        try:
            self._check()
        except AssertionError:
            print(self.fleet.tails())
            raise

    def _check(self) -> None:
        answered = Counter((c, n) for _, c, n in self.slack.answered)
        sent = {(c, n) for c, ns in self.accepted.items() for n in ns}
        assert set(answered) == sent, f"unanswered: {sorted(sent - set(answered))}"
        twice = [k for k, times in answered.items() if times > 1]
        assert twice == [], f"answered twice: {twice}"
        assert all(p["text"].startswith("re q-") for p in self.slack.posts), "no apology"
        violations = {
            c: got
            for c in range(CONVERSATIONS)
            if (got := [n for _, cc, n in self.slack.answered if cc == c]) != self.accepted[c]
        }
        assert violations == {}, f"answered out of order (conversation: answers): {violations}"

    def backlog_times(self, back_at: float, numbers: range) -> tuple[float, float]:
        """p50 and max seconds from Redis' return to the answer of messages ``numbers``."""
        waits = [when - back_at for when, _, n in self.slack.answered if n in numbers]
        return statistics.median(waits), max(waits)

    async def stop(self) -> None:
        await asyncio.to_thread(self.fleet.stop)
        await asyncio.to_thread(stop_redis, self.server)


@pytest.mark.parametrize("outage", [10.0, 90.0], ids=["10s", "90s"])
async def test_every_message_is_answered_once_and_in_order_through_a_redis_outage(
    outage: float, tmp_path: Path, model: SlowAnthropic, slack: TimedSlack, key_tag: str
) -> None:
    rig = Deployment(tmp_path, model, slack, key_tag)
    before, during = range(0, 2), range(2, 5)
    try:
        async with aiohttp.ClientSession() as session:
            await rig.start(session, "gateway")
            await rig.send(session, before)
            await rig.until_answered(CONVERSATIONS, limit=60)  # then Redis dies mid-run
            await asyncio.to_thread(rig.kill_redis)
            down_at = time.monotonic()
            await rig.send(session, during)  # acknowledged in time, Redis or not
            held = CONVERSATIONS * len(during)
            await asyncio.wait_for(rig.until_metric(session, "chorus_outbox_depth", held), 30)
            assert not rig.fleet.exited()
            await asyncio.sleep(max(0.0, outage - (time.monotonic() - down_at)))  # the outage
            back_at = await asyncio.to_thread(rig.restart_redis)
            await rig.until_answered(CONVERSATIONS * 5)
            await asyncio.wait_for(rig.until_drained(), 60)
            assert not rig.fleet.exited(), f"exited: {rig.fleet.exited()}"
    except BaseException:
        print(rig.fleet.tails())
        raise
    finally:
        await rig.stop()
    rig.check()
    p50, worst = rig.backlog_times(back_at, during)
    print(f"\nbacklog answered after a {outage:g}s outage: p50 {p50:.1f}s, max {worst:.1f}s")
    assert worst < 60, "the backlog is answered within seconds of Redis' return"


async def test_a_gateway_stopped_during_an_outage_keeps_what_slack_got_a_200_for(
    tmp_path: Path, model: SlowAnthropic, slack: TimedSlack, key_tag: str
) -> None:
    rig = Deployment(tmp_path, model, slack, key_tag)
    try:
        async with aiohttp.ClientSession() as session:
            await rig.start(session, "gateway1")
            await rig.send(session, range(0, 1))
            await rig.until_answered(CONVERSATIONS, limit=60)
            # Every reply posted is acked first: a reply posted whose ack Redis never got is
            # posted again by the next gateway (at-least-once to Slack; not what this tests).
            await asyncio.wait_for(rig.until_drained(), 60)
            await asyncio.to_thread(rig.kill_redis)
            await rig.send(session, range(1, 4))  # 60 events, each acknowledged to Slack

            gateway = rig.fleet.procs["gateway1"]
            stopped_at = time.monotonic()
            gateway.send_signal(signal.SIGTERM)
            code = await asyncio.to_thread(gateway.wait, 60)
            took = time.monotonic() - stopped_at
            assert code == 0, rig.fleet.log("gateway1")
            assert took < 30, f"the gateway took {took:.1f}s to stop"  # flush 5 s by default
            files = await asyncio.to_thread(lambda: sorted(rig.spool.glob("outbox-*.jsonl")))
            assert len(files) == 1
            lines = (await asyncio.to_thread(files[0].read_text)).splitlines()
            assert len(lines) == CONVERSATIONS * 3
            assert re.search(r'msg="outbox closed".* spooled=60', rig.fleet.log("gateway1"))

            back_at = await asyncio.to_thread(rig.restart_redis)
            rig.start_gateway("gateway2")
            await rig.until_answered(CONVERSATIONS * 4)
            await asyncio.wait_for(rig.until_drained(), 60)
            assert await asyncio.to_thread(lambda: list(rig.spool.glob("outbox-*"))) == []
            assert "outbox recovered" in rig.fleet.log("gateway2")
            metrics = await rig.fleet.metrics(session, "gateway2")
            assert sample(metrics, "chorus_outbox_recovered_total") == CONVERSATIONS * 3
            assert sample(metrics, "chorus_outbox_depth") == 0
            assert set(rig.fleet.exited()) == {"gateway1"}
    except BaseException:
        print(rig.fleet.tails())
        raise
    finally:
        await rig.stop()
    rig.check()
    p50, worst = rig.backlog_times(back_at, range(1, 4))
    print(
        f"\ngateway stopped in {took:.1f}s; spooled backlog answered after Redis and a new "
        f"gateway came back: p50 {p50:.1f}s, max {worst:.1f}s"
    )
