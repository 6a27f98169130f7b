"""Every background model call has an overall deadline (CHORUS_BACKGROUND_MODEL_DEADLINE): a
stuck provider cannot hold an insights worker's job. Through the official Anthropic SDK against
a loopback server that takes each request and never answers: an insights analysis, a day's
summary and community notes end at the deadline and are retried later as after an outage
(logged, counted as ``deadline``); an embedding off the reply path (summaries' vectors, the
knowledge base, notes) ends at the deadline too, and the app's embedder carries it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest
from aiohttp import web
from redis.asyncio import Redis

from bot.app import Chorus
from bot.llm.base import Provider
from bot.llm.registry import build_provider
from bot.memory.buffers import MemorySettings
from bot.memory.summaries import dump_summaries
from bot.memory.vectors import Bounded
from bot.ops.metrics import NullMetrics
from bot.resilience import RetryPolicy
from bot.settings import LLMSettings, settings_from
from bot.state import keys
from insights.summariser import RETRY_AFTER
from insights.worker import JobOutcome
from tests.loopback.anthropic_server import AnthropicServer
from tests.test_insights_worker import DUE
from tests.test_insights_worker import Rig as WorkerRig
from tests.test_summaries_contract import T0
from tests.test_summaries_contract import Rig as SummaryRig
from tests.test_summaries_units import summary

DEADLINE = 0.3
GUARD = 20.0  # seconds the test waits before calling the job stuck (the SDK's own: 60 s)


class StuckAnthropic(AnthropicServer):
    """Takes every request and answers none (until the test ends)."""

    def __init__(self) -> None:
        super().__init__()
        self.taken = 0
        self.release = asyncio.Event()

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        self.taken += 1
        await self.release.wait()
        return await super()._messages(request)


class StuckEmbedder:
    """An embedding model that never answers."""

    name = "stuck:embedder"

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        return None


class Outcomes(NullMetrics):
    """Counts ``chorus_insights_jobs`` by outcome."""

    def __init__(self) -> None:
        self.counted: list[str] = []

    def insights_job(self, outcome: str) -> None:
        self.counted.append(outcome)


@pytest.fixture
async def stuck() -> AsyncIterator[tuple[StuckAnthropic, Provider]]:
    async with StuckAnthropic() as server:
        settings = LLMSettings.model_validate(
            {"CHORUS_MODEL": "anthropic:claude-test", "ANTHROPIC_API_KEY": "k-test"}
            | {"ANTHROPIC_BASE_URL": server.base_url}
        )
        provider = build_provider(settings.model_spec(), settings, retry=RetryPolicy())
        try:
            yield server, provider
        finally:
            server.release.set()
            await provider.aclose()


async def test_a_stuck_insights_model_ends_the_analysis_at_its_deadline_and_retries_later(
    redis_client: Redis, key_tag: str, stuck: tuple[StuckAnthropic, Provider],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    server, provider = stuck
    settings = MemorySettings.model_validate({"CHORUS_BACKGROUND_MODEL_DEADLINE": DEADLINE})
    rig = WorkerRig(redis_client, key_tag, settings)
    rig.provider = provider  # type: ignore[assignment]
    await rig.say(rig.alice, "I went vegan last year", "a1")
    metrics = Outcomes()
    worker = rig.worker(metrics=metrics)
    with caplog.at_level(logging.WARNING, logger="chorus.insights"):
        done = await asyncio.wait_for(worker.run_once(DUE), GUARD)
    assert done == [(f"discord:{rig.alice}", JobOutcome.DEADLINE)]
    assert server.taken == 1
    assert metrics.counted == ["deadline"]
    assert any("passed its deadline; retrying later" in r.getMessage() for r in caplog.records)
    due = await redis_client.zscore(keys.insights_due(key_tag), f"discord:{rig.alice}")
    assert due is not None and due > DUE.timestamp() * 1000, "kept, due again after a backoff"
    assert await worker.run_once(DUE) == [], "not retried at once"


async def test_a_stuck_summary_model_ends_at_its_deadline_and_the_lines_wait(
    redis_client: Redis, key_tag: str, stuck: tuple[StuckAnthropic, Provider],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    server, provider = stuck
    rig = SummaryRig(redis_client, key_tag, CHORUS_BACKGROUND_MODEL_DEADLINE=DEADLINE)
    rig.provider = provider  # type: ignore[assignment]
    for n in range(6):
        await rig.turn("ada", f"line {n}", T0 - timedelta(days=1))
    rig.clock = T0
    summariser = rig.summariser()
    metrics = Outcomes()
    summariser.metrics = metrics
    with caplog.at_level(logging.WARNING, logger="chorus.insights.summaries"):
        done = await asyncio.wait_for(summariser.run_once(T0), GUARD)
    assert done == [(str(rig.conv), "deadline")]
    assert server.taken == 1 and metrics.counted == ["deadline"]
    assert any("passed its deadline" in r.getMessage() for r in caplog.records)
    assert await summariser.run_once(T0 + RETRY_AFTER - timedelta(seconds=1)) == []
    assert await redis_client.llen(keys.history(rig.conv)) > 0, "no line was consumed"


async def test_an_embedding_off_the_reply_path_ends_at_its_deadline(
    redis_client: Redis, key_tag: str
) -> None:
    rig = WorkerRig(
        redis_client,
        key_tag,
        MemorySettings.model_validate({"CHORUS_BACKGROUND_MODEL_DEADLINE": DEADLINE}),
    )
    metrics = Outcomes()
    worker = rig.worker(metrics=metrics, embedder=StuckEmbedder())
    assert worker.summariser is not None
    await asyncio.wait_for(worker.summariser.embed(rig.conv, 1), GUARD)  # nothing to embed yet
    stored = dump_summaries((summary("2025-01-01", "Ada planned the trip."),))
    await redis_client.set(keys.summary("sum", rig.conv), stored)
    assert await asyncio.wait_for(worker.summariser.embed(rig.conv, 1), GUARD) == 0
    assert metrics.counted == ["deadline"]


async def test_the_apps_embedder_carries_the_deadline(tmp_path: Path) -> None:
    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "OPENAI_API_KEY": "k",
            "CHORUS_EMBEDDING_MODEL": "openai:text-embedding-3-small",
            "CHORUS_KNOWLEDGE_PATHS": str(tmp_path),
            "CHORUS_BACKGROUND_MODEL_DEADLINE": "7",
            "CHORUS_REDIS_URL": f"memory://deadline-{tmp_path.name}",
        }
    )
    app = await Chorus.from_settings(settings)
    try:
        for embedder in (
            app.recall.recall.embedder,
            app.recall.indexer and app.recall.indexer.embedder,
        ):
            assert isinstance(embedder, Bounded) and embedder.deadline == 7
    finally:
        await app.aclose()
