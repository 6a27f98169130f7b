"""The daily cost cap on every model call (the embedded store and a real Redis): a turn's
reservation settled at its real cost by the commit, or given back when the model fails; ``/usage``
showing the day's spend and reservations; the moderation model's calls charged with their turn;
and the calls outside a turn (``bot.ops.model_calls``): embeddings and the day's summaries, each
reserved and charged, and refused once the cap is reached (background work waits for the next
UTC day). The estimate a
reservation holds is the prompt at list price plus the output budget. The cap across worker
processes is ``tests/test_cost_cap_e2e.py``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from bot.events import utcnow
from bot.llm.errors import ProviderUnavailable
from bot.llm.pricing import Price, PriceTable, request_tokens
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import LLMRequest, Message, TextPart, Usage
from bot.ops.model_calls import CostCapReached, Spend
from bot.router import texts as router_texts
from bot.safety.moderator import ChatClassifier
from bot.settings import QuotaSettings, SafetySettings
from bot.state.cost import CostLedger, Spent, micro
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.safety_rig import safety_rig
from tests.test_summaries_contract import T0
from tests.test_summaries_contract import Rig as SummaryRig


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


pytestmark = pytest.mark.redis
PRICES = PriceTable({"gpt-test": Price(input=2.0, output=8.0, cache_read=2.0, cache_write=2.0),
                     "cheap": Price(input=1.0, output=4.0, cache_read=1.0, cache_write=1.0),
                     "embed-test": Price(input=1.0, output=0.0, cache_read=1.0,
                                         cache_write=1.0)})  # fmt: skip


def spend(redis: Redis, tag: str, cap: float, clock: datetime | None = None) -> Spend:
    return Spend(CostLedger(redis, tag), PRICES, cap, clock=lambda: clock or utcnow())


def test_the_estimate_is_the_prompt_at_list_price_plus_the_output_budget() -> None:
    text = "x" * 3000
    request = LLMRequest(
        model="gpt-test",
        system=(TextPart(text=text),),
        messages=(Message.user(text),),
        max_tokens=500,
    )
    assert request_tokens(request) == 2000 + 8 * 2  # 3 characters a token, and the framing
    assert PRICES.estimate(request) == pytest.approx((2016 * 2.0 + 500 * 8.0) / 1e6)
    assert PRICES.estimate(request.model_copy(update={"model": "free-local"})) is None


async def test_an_answer_settles_its_reservation_at_the_real_cost(
    redis_url: str, key_tag: str
) -> None:
    async with safety_rig(redis_url, key_tag, quota=QuotaSettings(cost_usd_per_day=100)) as rig:
        rig.gate.prices = PRICES
        [answer] = await rig.say("what is the capital of France?")
        assert answer.startswith("echo:")
        assert isinstance(rig.provider, ScriptedProvider)
        [request] = rig.provider.requests
        today = await CostLedger(rig.redis, key_tag).today(utcnow())
        assert today.held == 0, "settled by the commit"
        assert today.spent == micro(PRICES.cost("gpt-test", _usage(request, answer)))
        [usage] = await rig.say("/usage")
        assert "Today (UTC) the bot has spent $0.0" in usage and "of its $100.00 daily" in usage


def _usage(request: LLMRequest, answer: str) -> Usage:
    """The usage the scripted model reports for ``answer`` to ``request``."""
    return Usage(
        input_tokens=sum(len(m.text) for m in request.messages) // 4 + 1,
        output_tokens=len(answer) // 4 + 1,
    )


async def test_a_model_that_fails_gives_its_reservation_back(redis_url: str, key_tag: str) -> None:
    provider = ScriptedProvider(
        [ProviderUnavailable("down", provider="scripted", status=529, attempts=3)]
    )
    quota = QuotaSettings(cost_usd_per_day=100)
    async with safety_rig(redis_url, key_tag, quota=quota, provider=provider) as rig:
        rig.gate.prices = PRICES
        assert await rig.say("hello?") == [router_texts.apology()]
        assert await CostLedger(rig.redis, key_tag).today(utcnow()) == Spent(0, 0)


async def test_the_moderation_models_calls_are_part_of_the_turns_cost(
    redis_url: str, key_tag: str
) -> None:
    """A classifying chat model runs inside the admitted turn: its calls are added to the turn's
    settlement (never refused by the turn's own reservation)."""
    scripted = ScriptedProvider(["ALLOW", "ALLOW"])
    classifier = ChatClassifier(scripted, "cheap", "1. Be kind.")
    quota = QuotaSettings(cost_usd_per_day=100)
    settings = SafetySettings(model="scripted:cheap", fail="closed")
    async with safety_rig(
        redis_url, key_tag, quota=quota, settings=settings, model=classifier
    ) as rig:
        rig.gate.prices = PRICES
        [answer] = await rig.say("what is the capital of France?")
        assert answer.startswith("echo:") and len(scripted.requests) == 2  # in and out
        assert isinstance(rig.provider, ScriptedProvider)
        [request] = rig.provider.requests
        moderation = sum(PRICES.cost("cheap", _usage(r, "ALLOW")) or 0 for r in scripted.requests)
        real = (PRICES.cost("gpt-test", _usage(request, answer)) or 0) + moderation
        assert await CostLedger(rig.redis, key_tag).today(utcnow()) == Spent(micro(real), 0)


class Embedder:
    name = "openai:embed-test@256"

    def __init__(self) -> None:
        self.calls = 0

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls += 1
        return [[1.0, 0.0] for _ in texts]

    async def aclose(self) -> None:
        return None


async def test_embeddings_are_charged_their_estimate_and_refused_past_the_cap(
    redis_client: Redis, key_tag: str
) -> None:
    meter = spend(redis_client, key_tag, cap=0.01)
    inner = Embedder()
    embedder = meter.embedder(inner)
    assert await embedder.embed(["x" * 300]) == [[1.0, 0.0]]
    assert await meter.today() == Spent(100, 0), "100 tokens at $1 a million"
    await meter.ledger.settle(meter.ledger.reservation("answers", 0, utcnow()), 10_000)
    with pytest.raises(CostCapReached):
        await embedder.embed(["again"])
    assert inner.calls == 1


async def test_a_summary_past_the_cap_waits_for_the_next_day_without_a_model_call(
    redis_client: Redis, key_tag: str
) -> None:
    rig = SummaryRig(redis_client, key_tag)
    for n in range(6):
        await rig.turn("ada", f"line {n}", T0 - timedelta(days=1))
    rig.clock = T0
    meter = spend(redis_client, key_tag, cap=0.01, clock=T0)
    await meter.ledger.settle(meter.ledger.reservation("answers", 0, T0), 10_000)
    summariser = rig.summariser()
    summariser.provider = meter.provider(rig.provider, "insights")
    assert await summariser.run_once(T0) == [(str(rig.conv), "over_cost_cap")]
    assert isinstance(rig.provider, ScriptedProvider) and rig.provider.requests == []
    midnight = datetime(T0.year, T0.month, T0.day, tzinfo=UTC) + timedelta(days=1)
    assert await summariser.run_once(midnight - timedelta(seconds=1)) == []
    meter.clock = lambda: midnight  # a new UTC day: a new budget
    assert await summariser.run_once(midnight) == [(str(rig.conv), "summarised")]
    assert (await meter.ledger.today(midnight)).spent > 0, "charged on the new day"
