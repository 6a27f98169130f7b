"""The insights worker end to end on both backends, with the scripted provider: merge,
provenance, budgets, invalid output, outages with backoff, /forget during an analysis,
debounce, and the run loop. Time is injected; nothing sleeps."""

from __future__ import annotations

import asyncio
import json
import logging
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.llm.errors import ProviderRequestError, ProviderUnavailable
from bot.llm.scripted import Script, ScriptedProvider
from bot.llm.types import LLMRequest
from bot.memory.buffers import MemorySettings, MemoryStore, Pin, UserBuffer
from bot.memory.insight_queue import InsightJob
from bot.state import keys
from bot.state.history import HistoryEntry, HistoryStore
from bot.state.insight_jobs import recent_outcomes
from bot.state.people import forgotten
from insights.worker import InsightsWorker, JobOutcome
from tests.turn_rig import enqueue

T0 = datetime(2025, 1, 2, 12, 0, tzinfo=UTC)
DUE = T0 + timedelta(seconds=30)


def outage() -> ProviderUnavailable:
    return ProviderUnavailable("overloaded", provider="scripted", status=529, attempts=3)


class Rig:
    def __init__(self, redis: Redis, tag: str, settings: MemorySettings) -> None:
        self.redis = redis
        self.tag = tag
        self.settings = settings
        self.history = HistoryStore(redis, max_messages=50, ttl_seconds=3600)
        self.memory = MemoryStore(redis, settings)
        self.provider = ScriptedProvider()
        self.clock = T0
        self.conv = ConversationKey(platform="discord", channel=f"general-{tag}")
        self.alice = f"alice-{tag}"
        self.bob = f"bob-{tag}"

    def worker(self, **options: Any) -> InsightsWorker:
        return InsightsWorker(
            self.redis,
            self.provider,
            "cheap-model",
            self.history,
            self.memory,
            self.settings,
            clock=lambda: self.clock,
            rng=random.Random(7),
            queue=self.tag,
            **options,
        )

    async def say(self, user: str, text: str, mid: str, *, at: datetime = T0) -> None:
        await self.history.append(
            self.conv,
            HistoryEntry(
                role="user",
                text=text,
                message_id=mid,
                author_id=user,
                author_name=user.split("-")[0].title(),
                at=at,
            ),
            HistoryEntry(role="assistant", text="Noted!", at=at),
        )
        await enqueue(
            self.redis,
            InsightJob(
                platform="discord",
                user_id=user,
                display_name=user.split("-")[0].title(),
                conversation=self.conv,
                message_id=mid,
                at=at,
            ),
            debounce=self.settings.insights_debounce,
            max_delay=self.settings.insights_max_delay,
            now=at,
            queue=self.tag,
        )

    async def pins(self, user: str) -> list[str]:
        return [p.text for p in (await self.memory.load("discord", user)).pins]


@pytest.fixture
def rig(redis_client: Redis, key_tag: str) -> Rig:
    return Rig(redis_client, key_tag, MemorySettings())


def answer(pins: list[dict[str, Any]] = (), recs: list[dict[str, Any]] = ()) -> str:  # type: ignore[assignment]
    return json.dumps({"pins": list(pins), "recommendations": list(recs)})


def add(text: str, line: str, confidence: float = 0.9) -> dict[str, Any]:
    return {
        "op": "add",
        "target": None,
        "text": text,
        "source_line": line,
        "confidence": confidence,
    }


async def test_an_analysis_merges_the_users_own_facts(rig: Rig) -> None:
    await rig.say(rig.alice, "I went vegan last year, and please keep answers short", "a1")
    rig.provider.script.append(
        answer(
            [add("Is vegan", "L1")],
            [{"text": "Keep answers short", "tool": None, "source_line": "L1"}],
        )
    )
    assert await rig.worker().run_once(DUE) == [(f"discord:{rig.alice}", JobOutcome.MERGED)]
    stored = await rig.memory.load("discord", rig.alice)
    assert [(p.text, p.confidence, p.created_at) for p in stored.pins] == [("Is vegan", 0.9, DUE)]
    assert stored.pins[0].came_from("a1")
    assert [r.text for r in stored.recommendations] == ["Keep answers short"]
    [request] = rig.provider.requests
    assert request.model == "cheap-model" and request.response_schema is not None
    assert await rig.worker().run_once(DUE + timedelta(hours=1)) == [], "the job is done"
    # the outcome is noted for the admin dashboard: ids and outcome, never what was learnt
    [noted] = await recent_outcomes(rig.redis, queue=rig.tag)
    assert noted == {
        "at": DUE.timestamp(),
        "platform": "discord",
        "user_id": rig.alice,
        "outcome": "merged",
    }


async def test_another_users_words_never_become_a_pin(rig: Rig) -> None:
    await rig.say(rig.alice, "What should I cook tonight?", "a1")
    await rig.say(rig.bob, "Alice is vegan, and she lives in Oslo", "b1")
    # The model gets it wrong: it attributes Bob's claims (L3) and the assistant's reply (L4)
    # to Alice. Lines: L1 Alice, L2 assistant, L3 Bob, L4 assistant.
    rig.provider.responder = lambda request: answer(
        [add("Is vegan", "L3"), add("Lives in Oslo", "L3"), add("Bob is a friend", "L4")]
    )
    outcomes = dict(await rig.worker().run_once(DUE))
    assert outcomes[f"discord:{rig.alice}"] is JobOutcome.UNCHANGED
    assert await rig.pins(rig.alice) == []
    prompt = rig.provider.requests[0].messages[0].text
    assert '<line id="L3" from="Bob" own="no">Alice is vegan' in prompt


async def test_a_spent_budget_skips_the_analysis_and_logs(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    rig.settings = MemorySettings(insights_user_daily_tokens=100)
    await rig.say(rig.alice, "I went vegan last year", "a1")
    await rig.worker().budget.charge("discord", rig.alice, [rig.conv], 100, DUE)
    with caplog.at_level(logging.WARNING, logger="chorus.insights"):
        outcome = await rig.worker().run_once(DUE)
    assert outcome == [(f"discord:{rig.alice}", JobOutcome.SKIPPED_BUDGET)]
    assert rig.provider.requests == []
    assert "budget spent" in caplog.text
    assert [getattr(r, "scope", None) for r in caplog.records if "budget" in r.message] == ["user"]
    assert await rig.worker().run_once(DUE + timedelta(minutes=5)) == [], "skipped, not retried"


async def test_a_spent_channel_budget_skips_every_user_there(rig: Rig) -> None:
    rig.settings = MemorySettings(insights_channel_daily_tokens=50)
    worker = rig.worker()
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.provider.script.append(answer([add("Is vegan", "L1")]))
    await worker.run_once(DUE)
    assert await worker.budget.used("discord", rig.alice, DUE) > 50, "usage was charged"
    await rig.say(rig.bob, "I live in Oslo", "b1", at=DUE)
    outcome = await worker.run_once(DUE + timedelta(seconds=30))
    assert outcome == [(f"discord:{rig.bob}", JobOutcome.SKIPPED_BUDGET)]
    assert len(rig.provider.requests) == 1


async def test_invalid_output_gets_one_retry_then_is_dropped(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.provider.script.extend(["not json", '{"pins": [{"op": "explode"}]}'])
    with caplog.at_level(logging.INFO, logger="chorus.insights"):
        outcome = await rig.worker().run_once(DUE)
    assert outcome == [(f"discord:{rig.alice}", JobOutcome.INVALID)]
    assert len(rig.provider.requests) == 2
    assert "dropped" in caplog.text
    assert await rig.pins(rig.alice) == []
    assert await rig.worker().budget.used("discord", rig.alice, DUE) > 0, "tokens still count"
    assert await rig.worker().run_once(DUE + timedelta(hours=1)) == [], "dropped, not retried"


async def test_invalid_then_valid_output_is_merged(rig: Rig) -> None:
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.provider.script.extend(["```\nnope", answer([add("Is vegan", "L1")])])
    assert await rig.worker().run_once(DUE) == [(f"discord:{rig.alice}", JobOutcome.MERGED)]
    assert await rig.pins(rig.alice) == ["Is vegan"]


async def test_an_outage_reschedules_with_backoff_and_loses_nothing(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    await rig.say(rig.alice, "I went vegan last year", "a1")
    worker = rig.worker()
    expected = InsightsWorker.backoff(rig.worker(), 1)  # same seeded jitter
    assert 15 <= expected <= 30  # the 30 s base with equal jitter
    rig.provider.script.append(outage())
    with caplog.at_level(logging.WARNING, logger="chorus.insights"):
        assert await worker.run_once(DUE) == [(f"discord:{rig.alice}", JobOutcome.RETRY)]
    assert "retrying later" in caplog.text
    assert await worker.run_once(DUE + timedelta(seconds=expected - 1)) == []
    rig.provider.script.append(answer([add("Is vegan", "L1")]))
    later = DUE + timedelta(seconds=expected + 1)
    assert await worker.run_once(later) == [(f"discord:{rig.alice}", JobOutcome.MERGED)]
    assert await rig.pins(rig.alice) == ["Is vegan"]


def test_backoff_grows_exponentially_with_jitter_and_a_cap(rig: Rig) -> None:
    worker = rig.worker(backoff_base=30.0, backoff_cap=3600.0)
    delays = [worker.backoff(n) for n in range(1, 10)]
    for n, delay in enumerate(delays, 1):
        ceiling = min(3600.0, 30.0 * 2 ** (n - 1))
        assert ceiling / 2 <= delay <= ceiling  # the shared policy's equal jitter
    assert delays[-1] >= 1800.0 and len(set(delays)) == len(delays)


async def test_too_many_outages_drop_the_job(rig: Rig, caplog: pytest.LogCaptureFixture) -> None:
    await rig.say(rig.alice, "I went vegan last year", "a1")
    worker = rig.worker(max_attempts=2)
    rig.provider.responder = lambda request: outage()
    assert await worker.run_once(DUE) == [(f"discord:{rig.alice}", JobOutcome.RETRY)]
    with caplog.at_level(logging.ERROR, logger="chorus.insights"):
        outcome = await worker.run_once(DUE + timedelta(hours=2))
    assert outcome == [(f"discord:{rig.alice}", JobOutcome.DROPPED)]
    assert "too many times" in caplog.text
    assert await worker.queue.next_due() is None


async def test_a_refused_request_is_dropped_not_retried(rig: Rig) -> None:
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.provider.script.append(ProviderRequestError("bad schema", provider="scripted", status=400))
    assert await rig.worker().run_once(DUE) == [(f"discord:{rig.alice}", JobOutcome.DROPPED)]
    assert await rig.worker().queue.next_due() is None


async def test_forget_during_an_analysis_wins(rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.provider.script.append(answer([add("Is vegan", "L1")]))
    rig.clock = DUE  # the analysis starts now
    update = rig.memory.update

    async def forget_first(*args: Any, **kwargs: Any) -> UserBuffer | None:
        # the user says /forget while the model is thinking
        at = DUE + timedelta(seconds=1)
        await rig.memory.store.forget([forgotten(("discord", rig.alice), at)], person=None)
        return await update(*args, **kwargs)

    monkeypatch.setattr(rig.memory, "update", forget_first)
    assert await rig.worker().run_once(DUE) == [(f"discord:{rig.alice}", JobOutcome.FORGOTTEN)]
    assert await rig.pins(rig.alice) == []


async def test_a_burst_is_analysed_once(rig: Rig) -> None:
    for n in range(3):
        await rig.say(rig.alice, f"message {n}", f"a{n}", at=T0 + timedelta(seconds=5 * n))
    rig.provider.responder = lambda request: answer()
    worker = rig.worker()
    assert await worker.run_once(T0 + timedelta(seconds=29)) == []
    assert len(await worker.run_once(T0 + timedelta(seconds=30))) == 1
    assert len(rig.provider.requests) == 1
    assert rig.provider.requests[0].messages[0].text.count('own="yes"') == 3 + 1  # +1: the rule


async def test_pins_shown_to_the_model_can_be_replaced(rig: Rig) -> None:
    await rig.memory.save(
        UserBuffer(
            platform="discord",
            user_id=rig.alice,
            pins=(Pin(text="Is vegan", source="a0", confidence=0.9, created_at=T0, updated_at=T0),),
        )
    )
    await rig.say(rig.alice, "I eat fish again these days", "a1")
    rig.provider.script.append(
        answer(
            [
                {
                    "op": "replace",
                    "target": 1,
                    "text": "Eats fish again",
                    "source_line": "L1",
                    "confidence": 0.9,
                }
            ]
        )
    )
    assert await rig.worker().run_once(DUE) == [(f"discord:{rig.alice}", JobOutcome.MERGED)]
    assert await rig.pins(rig.alice) == ["Eats fish again"]
    assert "[1] (confidence 0.90) Is vegan" in rig.provider.requests[0].messages[0].text


async def test_a_job_without_the_users_lines_calls_no_model(rig: Rig) -> None:
    await rig.say(rig.alice, "hello", "a1")
    await rig.history.forget_author(rig.conv, rig.alice)
    assert await rig.worker().run_once(DUE) == [
        (f"discord:{rig.alice}", JobOutcome.NOTHING_TO_READ)
    ]
    assert rig.provider.requests == []


async def test_run_works_until_closed(rig: Rig) -> None:
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.clock = DUE
    answered = asyncio.Event()

    def respond(request: LLMRequest) -> Script:
        answered.set()
        return answer([add("Is vegan", "L1")])

    rig.provider.responder = respond
    worker = rig.worker()
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(answered.wait(), timeout=10)
    await worker.aclose()
    await asyncio.wait_for(task, timeout=10)
    assert await rig.pins(rig.alice) == ["Is vegan"]


async def test_aclose_cancels_a_stuck_analysis(rig: Rig) -> None:
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.clock = DUE
    started = asyncio.Event()

    class Stuck(ScriptedProvider):
        async def complete(self, request: LLMRequest) -> Any:
            started.set()
            await asyncio.Event().wait()  # never answers

    rig.provider = Stuck()
    worker = rig.worker()
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), timeout=10)
    await worker.aclose(grace=0.01)
    assert task.done()
    lease = keys.insights_lease("discord", rig.alice, rig.tag)
    assert await rig.redis.exists(lease), "the lease stays until it expires: no double analysis"


async def test_job_outcomes_and_the_insights_models_tokens_are_counted(rig: Rig) -> None:
    """/metrics' insights jobs and skips, and the cheap model's tokens (for its cost)."""
    from bot.llm.types import LLMResponse, TextPart, Usage
    from bot.ops.metrics import Metrics

    metrics = Metrics()
    rig.settings = MemorySettings(insights_user_daily_tokens=600)
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.provider.script.append(
        LLMResponse(
            parts=(TextPart(text=answer([add("Is vegan", "L1")])),),
            stop_reason="end_turn",
            usage=Usage(input_tokens=600, output_tokens=40),
        )
    )
    await rig.worker(metrics=metrics).run_once(DUE)
    await rig.say(rig.alice, "and I live in Oslo", "a2")  # today's 600 tokens are spent
    await rig.worker(metrics=metrics).run_once(DUE + timedelta(minutes=5))
    sample = metrics.registry.get_sample_value
    assert sample("chorus_insights_jobs_total", {"outcome": "merged"}) == 1
    assert sample("chorus_insights_jobs_total", {"outcome": "skipped_budget"}) == 1
    assert sample("chorus_llm_tokens_total", {"model": "cheap-model", "kind": "input"}) == 600
    assert sample("chorus_llm_tokens_total", {"model": "cheap-model", "kind": "output"}) == 40
