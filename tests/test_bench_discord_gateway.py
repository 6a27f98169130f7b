"""The Discord gateway benchmark runs end to end on a real Redis: every message it sends
through the sharded adapter arrives on the inbound stream, and the report has its row."""

from __future__ import annotations

from bench.discord_gateway import bench_gateway, main


async def test_every_message_arrives_and_is_costed(real_redis_url: str) -> None:
    got = await bench_gateway(real_redis_url, messages=60)
    assert got["messages"] == 60
    assert got["cpu_ms_per_message"] > 0 and got["messages_per_cpu_s"] > 0


async def test_the_report_has_a_measured_row(real_redis_url: str) -> None:
    lines = await main(real_redis_url)
    assert lines[0] == "## Discord gateway: CPU per inbound message"
    assert lines[-1].startswith("| 4 | 3000 |"), lines[-1]
