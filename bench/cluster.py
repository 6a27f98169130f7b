"""Redis round trips per answered message on one Redis server and on a Redis Cluster.

The whole pipeline runs in this process (``bench.overhead``'s Chorus: the Redis Streams bus,
claim, history, memory, the scripted model, reply, commit, and the bench's own publish of each
message and read of its reply), one message at a time, each turn's tail awaited. Round trips
are counted at the connection (``tests.roundtrips``: each command or whole pipeline written to
one connection; a connection's handshake is not counted). A cluster pipeline writes once to
each node its keys live on, concurrently, and each write counts here. The start-up is taken out
as the difference between a long and a short run, divided by the extra messages. Both stores are
private servers started here: a ``redis-server`` and a cluster of three primaries
(``tests.redis_cluster``); nothing else's Redis is touched.

    python -m bench.cluster      # prints a Markdown table
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from pathlib import Path

from bench.overhead import _chorus, _ok
from bot.llm.scripted import ScriptedProvider
from bot.state import keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.redis_cluster import start_cluster
from tests.redis_server import free_port, start_redis, stop_redis
from tests.roundtrips import counting_round_trips

SHORT, LONG = 20, 100


async def per_message(url: str) -> float:
    """Round trips per answered message over ``url`` (the long run less the short one)."""
    counts: list[int] = []
    async with AnthropicServer() as server:
        for messages in (SHORT, LONG):
            with counting_round_trips() as counter:
                await _chorus(server, messages, url, "redis", ScriptedProvider(responder=_ok))
            counts.append(counter.count)
            keys.use_cluster_layout(False)
    return (counts[1] - counts[0]) / (LONG - SHORT)


async def main() -> list[str]:
    logging.disable(logging.WARNING)
    binary = shutil.which("redis-server")
    if binary is None:
        return ["redis-server is not installed: not measured"]
    with tempfile.TemporaryDirectory() as workdir:
        port = free_port()
        server = start_redis(binary, port, Path(workdir))
        cluster = start_cluster(Path(workdir) / "cluster")
        try:
            single = await per_message(f"redis://127.0.0.1:{port}/0")
            clustered = await per_message(cluster.url)
        finally:
            cluster.stop()
            stop_redis(server)
    return [
        "| store | Redis round trips per answered message (pipeline and bench) |",
        "|---|---|",
        f"| one Redis server | {single:.2f} |",
        f"| Redis Cluster, three primaries | {clustered:.2f} |",
    ]


if __name__ == "__main__":
    print("\n".join(asyncio.run(main())))
