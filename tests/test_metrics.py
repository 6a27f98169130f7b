"""The metrics facade: counters and histograms move, costs are estimated from the price table,
scrape-time callbacks (bus lag and pending, adapter counters) are read at every render."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import AsyncGenerator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from bot.bus.base import InProcessBus
from bot.bus.gauges import bus_gauges
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND
from bot.events import Author, ChatMessage, ConversationKey
from bot.llm.pricing import DEFAULT_PRICES, PriceTable, load_prices
from bot.llm.types import Usage
from bot.ops.metrics import Metrics, NullMetrics
from bot.settings import ConfigError, load_settings
from bot.state import connect


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def scrape(metrics: Metrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    body, content_type = await metrics.render()
    assert content_type.startswith("text/plain")
    return samples(body.decode())


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def message(conversation: str, number: int) -> ChatMessage:
    return ChatMessage(
        platform="console",
        id=f"m{number}",
        conversation=ConversationKey(platform="console", channel=conversation),
        author=Author(id="u1", display_name="Ada"),
        text=f"hello {number}",
    )


async def test_chokepoint_counters_and_histograms_move() -> None:
    metrics = Metrics(process_metrics=False)
    metrics.message_in("discord")
    metrics.message_in("discord")
    metrics.message_out("discord")
    metrics.engagement("twitch", "answer_now")
    metrics.observe_ingest_to_reply("discord", 1.5)
    metrics.observe_llm("claude-sonnet-4-5", 2.5)
    metrics.observe_overhead(0.0008)
    metrics.observe_overhead(-0.001)  # clock noise clamps to 0, never a negative observation
    metrics.tool_call("current_time", "ok")
    metrics.tool_call("fetch_page", "error")
    metrics.insights_job("merged")
    metrics.recall("timeout")
    metrics.ratelimit_wait("twitch", 0.3)
    metrics.llm_fallback("anthropic:claude-sonnet-4-5", "openai:gpt-4.1-mini")
    metrics.llm_error("gpt-4.1-mini", "ChainExhausted")
    got = await scrape(metrics)

    assert got[key("chorus_messages_in_total", platform="discord")] == 2
    assert got[key("chorus_messages_out_total", platform="discord")] == 1
    assert got[key("chorus_engagement_decisions_total", platform="twitch", decision="answer_now")]
    assert got[key("chorus_ingest_to_reply_seconds_count", platform="discord")] == 1
    assert got[key("chorus_ingest_to_reply_seconds_bucket", platform="discord", le="1.0")] == 0
    assert got[key("chorus_ingest_to_reply_seconds_bucket", platform="discord", le="2.0")] == 1
    assert got[key("chorus_llm_call_seconds_sum", model="claude-sonnet-4-5")] == 2.5
    # Overhead buckets are in the millisecond range: 0.8 ms lands between 0.5 ms and 1 ms.
    assert got[key("chorus_overhead_seconds_bucket", le="0.0005")] == 1  # the clamped 0
    assert got[key("chorus_overhead_seconds_bucket", le="0.001")] == 2
    assert got[key("chorus_overhead_seconds_sum")] == pytest.approx(0.0008)
    assert got[key("chorus_tool_calls_total", tool="fetch_page", outcome="error")] == 1
    assert got[key("chorus_insights_jobs_total", outcome="merged")] == 1
    assert got[key("chorus_recall_queries_total", outcome="timeout")] == 1
    assert got[key("chorus_ratelimit_wait_seconds_count", platform="twitch")] == 1
    assert (
        got[
            key(
                "chorus_llm_fallbacks_total",
                from_model="anthropic:claude-sonnet-4-5",
                to_model="openai:gpt-4.1-mini",
            )
        ]
        == 1
    )
    assert got[key("chorus_llm_errors_total", model="gpt-4.1-mini", error="ChainExhausted")] == 1


async def test_tokens_and_estimated_cost_per_model(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics(process_metrics=False)
    usage = Usage(
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=2_000_000,
        cache_write_tokens=400_000,
    )
    metrics.tokens("claude-sonnet-4-5-20250929", usage)  # a dated snapshot finds its family
    with caplog.at_level(logging.INFO, logger="chorus.metrics"):
        metrics.tokens("llama3.2", Usage(input_tokens=10, output_tokens=5))
        metrics.tokens("llama3.2", Usage(input_tokens=10, output_tokens=5))
    got = await scrape(metrics)

    model = "claude-sonnet-4-5-20250929"
    assert got[key("chorus_llm_tokens_total", model=model, kind="input")] == 1_000_000
    assert got[key("chorus_llm_tokens_total", model=model, kind="output")] == 100_000
    assert got[key("chorus_llm_tokens_total", model=model, kind="cache_read")] == 2_000_000
    assert got[key("chorus_llm_tokens_total", model=model, kind="cache_write")] == 400_000
    # 1M x $3 + 0.1M x $15 + 2M x $0.30 + 0.4M x $3.75
    assert got[key("chorus_llm_cost_usd_total", model=model)] == pytest.approx(3 + 1.5 + 0.6 + 1.5)
    assert got[key("chorus_llm_tokens_total", model="llama3.2", kind="input")] == 20
    assert key("chorus_llm_cost_usd_total", model="llama3.2") not in got
    unpriced = [r for r in caplog.records if "no price" in r.getMessage()]
    assert len(unpriced) == 1  # said once per model, not per call


def test_price_lookup_by_longest_prefix_at_a_word_boundary() -> None:
    table = PriceTable.default()
    assert table.lookup("gpt-4o-mini-2024-07-18") == DEFAULT_PRICES["gpt-4o-mini"]
    assert table.lookup("gpt-4o") == DEFAULT_PRICES["gpt-4o"]
    assert table.lookup("gemini-2.5-flash-lite") == DEFAULT_PRICES["gemini-2.5-flash-lite"]
    assert table.lookup("claude-opus-4-5-20251101") == DEFAULT_PRICES["claude-opus-4-5"]
    assert table.lookup("claude-opus-4-20250514") == DEFAULT_PRICES["claude-opus-4"]
    assert table.lookup("openai:anthropic/claude-sonnet-4.5") == DEFAULT_PRICES["claude-sonnet-4"]
    assert table.lookup("o3x") is None  # a prefix must end at a word boundary
    assert table.lookup("llama3.2") is None
    # OpenAI and Gemini bill no cache writes: an omitted cache price is the input price.
    assert DEFAULT_PRICES["gpt-4.1-mini"].cache_write == DEFAULT_PRICES["gpt-4.1-mini"].input


async def test_prices_file_overrides_and_extends_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps(
            {"gpt-4.1-mini": {"input": 1.0, "output": 2.0}, "my-local": {"input": 0, "output": 0}}
        )
    )
    monkeypatch.setenv("CHORUS_PRICES", str(path))
    metrics = Metrics.from_settings(load_settings().metrics)
    metrics.tokens("gpt-4.1-mini", Usage(input_tokens=1_000_000, cache_read_tokens=1_000_000))
    metrics.tokens("my-local", Usage(input_tokens=5))
    got = await scrape(metrics)
    assert got[key("chorus_llm_cost_usd_total", model="gpt-4.1-mini")] == pytest.approx(2.0)
    assert got[key("chorus_llm_cost_usd_total", model="my-local")] == 0
    assert load_prices(str(path)).lookup("claude-haiku-4-5") == DEFAULT_PRICES["claude-haiku-4-5"]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected an object"),
        ('{"m": {"input": -1, "output": 1}}', "bad prices for 'm'"),
        ('{"m": {"input": 1}}', "bad prices for 'm'"),
    ],
)
def test_a_bad_prices_file_names_the_variable(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match="CHORUS_PRICES") as info:
        load_prices(str(path))
    assert fragment in str(info.value)
    with pytest.raises(ConfigError, match="cannot read"):
        load_prices(str(tmp_path / "missing.json"))


async def test_each_app_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()  # a global registry would refuse the second
    first.message_in("slack")
    assert key("chorus_messages_in_total", platform="slack") in await scrape(first)
    assert key("chorus_messages_in_total", platform="slack") not in await scrape(second)


async def test_gauge_callbacks_are_read_at_every_scrape(caplog: pytest.LogCaptureFixture) -> None:
    metrics = Metrics(process_metrics=False)
    sent = {"count": 3}
    remaining = {"units": 9000.0}

    async def quota() -> dict[tuple[str, ...], float]:
        return {("UCbot",): remaining["units"]}

    def broken() -> float:
        raise RuntimeError("adapter gone")

    metrics.register_gauge_callback(
        "chorus_twitch_sent", "Messages Twitch accepted", (), lambda: sent["count"], kind="counter"
    )
    metrics.register_gauge_callback(
        "chorus_youtube_quota_remaining", "Quota units left today", ("channel",), quota
    )
    metrics.register_gauge_callback("chorus_broken", "Always fails", (), broken)
    metrics.register_gauge_callback("chorus_wrong_labels", "Bad shape", ("a", "b"), lambda: 1.0)
    with pytest.raises(ValueError, match="already registered"):
        metrics.register_gauge_callback("chorus_twitch_sent", "again", (), lambda: 1.0)
    with pytest.raises(ValueError, match="already registered"):
        metrics.register_gauge_callback("chorus_messages_in_total", "clash", (), lambda: 1.0)

    with caplog.at_level(logging.WARNING, logger="chorus.metrics"):
        got = await scrape(metrics)
    assert got[key("chorus_twitch_sent_total")] == 3
    assert got[key("chorus_youtube_quota_remaining", channel="UCbot")] == 9000
    assert not any(name in {"chorus_broken", "chorus_wrong_labels"} for name, _ in got)
    failed = [r for r in caplog.records if "callback failed" in r.getMessage()]
    assert len(failed) == 2 and all(r.exc_info for r in failed)

    sent["count"] = 5
    remaining["units"] = 8950.0
    got = await scrape(metrics)
    assert got[key("chorus_twitch_sent_total")] == 5
    assert got[key("chorus_youtube_quota_remaining", channel="UCbot")] == 8950


async def test_in_process_bus_lag_and_pending() -> None:
    bus = InProcessBus()
    metrics = Metrics(process_metrics=False)
    metrics.watch_bus(bus_gauges(bus))
    for number in range(3):
        await bus.publish(INBOUND, message("c1", number))
    deliveries = bus.consume(INBOUND, ChatMessage, group="agent")
    first = await anext(deliveries)
    got = await scrape(metrics)
    assert got[key("chorus_bus_lag", topic=INBOUND, group="agent")] == 2
    assert got[key("chorus_bus_pending", topic=INBOUND, group="agent")] == 1
    await first.ack()
    got = await scrape(metrics)
    assert got[key("chorus_bus_pending", topic=INBOUND, group="agent")] == 0
    assert isinstance(deliveries, AsyncGenerator)  # an async generator, so it can be closed
    await deliveries.aclose()
    await bus.close()


async def test_redis_streams_bus_lag_and_pending(redis_url: str, key_tag: str) -> None:
    client = await connect.open_redis(redis_url)
    bus = RedisStreamsBus(client, consumer="metrics-test", namespace=key_tag, partitions=4)
    metrics = Metrics(process_metrics=False)
    metrics.watch_bus(bus_gauges(bus, redis=client, topics=(INBOUND, "outbound:console")))
    try:
        got = await scrape(metrics)
        assert not [name for name, _ in got if name.startswith("chorus_bus_")]  # no streams yet
        for number in range(3):
            await bus.publish(INBOUND, message(key_tag, number))  # one conversation: one stream
        stream = bus.stream(INBOUND, bus.partition_of(message(key_tag, 0)))
        await client.xgroup_create(stream, "agent", id="0")
        await client.xreadgroup("agent", "w1", {stream: ">"}, count=1)
        got = await scrape(metrics)
        assert got[key("chorus_bus_lag", topic=INBOUND, group="agent")] == 2
        assert got[key("chorus_bus_pending", topic=INBOUND, group="agent")] == 1
    finally:
        await bus.close()
        await client.aclose()


def test_bus_gauges_refuse_what_they_cannot_read() -> None:
    with pytest.raises(TypeError, match="no bus gauges for object"):
        bus_gauges(object())


async def test_streams_bus_gauges_need_the_bus_client() -> None:
    client = await connect.open_redis("memory://gauges")
    bus = RedisStreamsBus(client, consumer="g")
    with pytest.raises(ValueError, match="Redis client"):
        bus_gauges(bus)
    await bus.close()
    await client.aclose()


def test_null_metrics_mirrors_every_public_method() -> None:
    public = {
        name: member
        for name, member in inspect.getmembers(Metrics, inspect.isfunction)
        if not name.startswith("_") and name not in {"refresh", "render"}
    }
    for name, member in public.items():
        twin = getattr(NullMetrics, name, None)
        assert twin is not None, f"NullMetrics lacks {name}"
        assert inspect.signature(twin) == inspect.signature(member), name
    null = NullMetrics()
    null.tokens("m", Usage(input_tokens=1))  # and they do nothing, without error
    null.message_in("x")
