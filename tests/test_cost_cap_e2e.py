"""The daily cost cap is reserved, not only checked, across two ``chorus run --role worker``
processes on a real Redis.

Eight mentions arrive at once, in eight channels (four on each worker's partitions), under a cap
that one answer exhausts (``CHORUS_QUOTA_COST_USD_DAY=0.01`` and a price table that makes any
answer cost more). The loopback model takes a second to answer, so all eight turns are admitted
before any is recorded. A cap checked against the recorded spend alone lets all eight through
(eight model calls, eight answers); reserving each turn's estimated cost at admission lets
exactly one through: one model call, one answer, and the seven others refused with the cost
notice (one per channel), on both workers. Its real cost is what the day's spend shows
afterwards, and nothing stays reserved.

Past the cap the insights worker (``chorus insights --drain``, on a private Redis whose day is
spent) refuses its analysis before calling the model: the job waits for the next UTC day.
"""

from __future__ import annotations

import asyncio
import json
import signal
from datetime import timedelta
from pathlib import Path
from typing import cast

from aiohttp import web
from redis.asyncio import Redis

import prompts
from bot.bus.streams import FIELD, RedisStreamsBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Reply, utcnow
from bot.memory.insight_queue import InsightJob
from bot.safety.audit import read_audit
from bot.state import connect, keys
from bot.state.cost import CostLedger
from bot.state.history import HistoryEntry, HistoryStore
from tests.bus_leases import wait_balanced
from tests.loopback.anthropic_server import AnthropicServer
from tests.outage_rig import redis_binary
from tests.redis_server import free_port, start_redis, stop_redis
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_safety_quota_e2e import _copy, conversations
from tests.test_worker_takeover_e2e import worker_env
from tests.turn_rig import enqueue

PARTITIONS = 16
WORKERS = 2
MENTIONS = 8
PRICES = {"claude-test": {"input": 1000.0, "output": 1000.0}}  # USD per million tokens


class SlowAnthropic(AnthropicServer):
    """Answers after a second: every turn admitted at once is still in flight."""

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(1.0)
        return await super()._messages(request)


async def spread(redis: Redis, bus: RedisStreamsBus, tag: str) -> list[ConversationKey]:
    """``MENTIONS`` conversations, half on the partitions of each worker (read off the leases)."""
    names = [keys.bus_lease(INBOUND, "agent", p, tag) for p in range(PARTITIONS)]
    holders = cast("list[str]", await redis.mget(names))
    by_worker: dict[str, list[ConversationKey]] = {}
    for partition, conv in enumerate(conversations(bus, tag)):
        by_worker.setdefault(holders[partition].split(":")[0], []).append(conv)
    assert len(by_worker) == WORKERS
    return [conv for convs in by_worker.values() for conv in convs[: MENTIONS // WORKERS]]


async def replies(redis: Redis, tag: str) -> list[Reply]:
    found: list[Reply] = []
    for p in range(PARTITIONS):
        rows = cast(
            "list[tuple[str, dict[str, str]]]",
            await redis.xrange(keys.bus_stream(outbound_topic("console"), p, tag)),
        )
        found += [Reply.model_validate_json(fields[FIELD]) for _, fields in rows]
    return found


async def test_simultaneous_mentions_across_two_workers_get_one_model_call_under_the_cap(
    real_redis_url: str, real_redis: Redis, key_tag: str, tmp_path: Path
) -> None:
    tag = key_tag
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), encoding="utf-8")
    async with SlowAnthropic() as model:
        model.default_reply = lambda body: "answered"
        env = worker_env(tmp_path, real_redis_url, tag, model.base_url)
        env |= {
            "CHORUS_QUOTA_COST_USD_DAY": "0.01",
            "CHORUS_PRICES": str(prices),
            "PYTHONPATH": str(ROOT),
        }
        logs = [tmp_path / f"w{n}.log" for n in range(WORKERS)]
        workers = [
            await spawn_chorus(["run", "--role", "worker"], env, ROOT) for _ in range(WORKERS)
        ]
        drains = [
            asyncio.create_task(_copy(pipe, path))
            for proc, path in zip(workers, logs, strict=True)
            for pipe in (proc.stdout, proc.stderr)
        ]
        publisher = RedisStreamsBus(real_redis, consumer="test", namespace=tag)
        try:
            await asyncio.wait_for(wait_balanced(real_redis, tag, PARTITIONS, WORKERS), 60)
            mentions = [
                ChatMessage(
                    platform="console",
                    id=f"{conv.channel}-m",
                    conversation=conv,
                    author=Author(id=f"u{n}-{tag}", display_name=f"user{n}"),
                    text="what is the capital of France?",
                    is_direct=True,
                )
                for n, conv in enumerate(await spread(real_redis, publisher, tag))
            ]
            await asyncio.gather(*(publisher.publish(INBOUND, m) for m in mentions))
            await publisher.drain(timeout=90)  # every mention acked: answered or refused
            found = await replies(real_redis, tag)
            audit = await read_audit(real_redis, namespace=tag, count=1000)
            spent = await CostLedger(real_redis, tag).today(utcnow())
        finally:
            await publisher.close()
            for proc in workers:
                proc.send_signal(signal.SIGTERM)
            for proc in workers:
                await asyncio.wait_for(proc.wait(), 60)
            await asyncio.gather(*drains, return_exceptions=True)

    assert [proc.returncode for proc in workers] == [0] * WORKERS
    assert len(model.requests) == 1, "one model call: the others saw its reservation"
    notice = prompts.render("safety/quota_cost", wait="").split(" I'll")[0]
    answers = [r.text for r in found if r.text == "answered"]
    notices = [r for r in found if r.text.startswith(notice)]
    assert len(answers) == 1 and len(notices) == MENTIONS - 1, [r.text for r in found]
    assert len({r.conversation for r in notices}) == MENTIONS - 1, "one notice per channel"
    quota = [e for e in audit if e.direction == "quota"]
    assert [e.rule for e in quota] == ["quota:cost_usd_day"] * (MENTIONS - 1)
    refusing = [path for path in logs if "quota:cost_usd_day" in path.read_text()]
    assert len(refusing) == WORKERS, "both workers refused on the one shared reservation"
    assert spent.held == 0, "the answer's reservation was settled"
    assert spent.spent >= 10_000, "its real cost exhausts the cap"


async def test_the_insights_worker_refuses_its_analysis_past_the_cap(tmp_path: Path) -> None:
    binary, port = redis_binary(), free_port()
    server = start_redis(binary, port, tmp_path)  # private: ``chorus insights`` drains it all
    url = f"redis://127.0.0.1:{port}/0"
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps(PRICES), encoding="utf-8")
    redis = await connect.open_redis(url)
    conv = ConversationKey(platform="discord", channel="general")
    now = utcnow()
    try:
        ledger = CostLedger(redis)
        spent = ledger.reservation("earlier-answers", 0, now)
        await ledger.settle(spent, 10_000)  # the day's cap is spent
        line = HistoryEntry(role="user", text="I am vegan", message_id="m1", author_id="ada")
        await HistoryStore(redis, max_messages=40, ttl_seconds=3600).append(conv, line)
        job = InsightJob(
            platform="discord", user_id="ada", display_name="Ada", conversation=conv,
            message_id="m1", at=now,
        )  # fmt: skip
        await enqueue(redis, job, debounce=0, max_delay=0, now=now)
        async with AnthropicServer() as model:
            env = base_env(tmp_path) | {
                "CHORUS_REDIS_URL": url,
                "CHORUS_MODEL": "anthropic:claude-test",
                "CHORUS_INSIGHTS_MODEL": "anthropic:claude-test",
                "ANTHROPIC_API_KEY": "test-key-0123456789",
                "ANTHROPIC_BASE_URL": model.base_url,
                "CHORUS_QUOTA_COST_USD_DAY": "0.01",
                "CHORUS_PRICES": str(prices),
                "CHORUS_SUMMARIES": "false",
            }
            proc = await spawn_chorus(["insights", "--drain"], env, ROOT)
            out, err = await asyncio.wait_for(proc.communicate(), 120)
        log = (out + err).decode()
        assert proc.returncode == 0, log
        assert model.requests == [], "no model call past the cap"
        assert "daily cost cap reached; insights analysis waits for the next UTC day" in log
        due = await redis.zscore(keys.insights_due(), "discord:ada")
        assert due is not None, "the job is kept"
        tomorrow = now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
        assert due >= tomorrow.timestamp() * 1000, "it waits for the next UTC day"
        assert await redis.hget(keys.insights_job("discord", "ada"), "attempts") in (None, "0")
    finally:
        await redis.aclose()
        await asyncio.to_thread(stop_redis, server)
