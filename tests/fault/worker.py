"""A Chorus worker process for the exactly-once fault test: the real ``Router`` over the Redis
Streams bus, with a scripted model whose every turn awaits a fixed bit of simulated work, so
turns are in flight when the test kills a worker.

Usage: ``python tests/fault/worker.py REDIS_URL NAMESPACE WORKER_NAME [WORK_MS]``; prints
``ready`` once consuming, stops gracefully on SIGTERM (as ``chorus run`` does).

The router is the production one: its claims (``bot/bus/claims.py``) and its transactional reply
over the Streams bus are what the test proves.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.streams import RedisStreamsBus
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import LLMRequest, LLMResponse
from bot.router.build import build_router
from bot.router.core import RouterLimits
from bot.router.text_commands import Commands
from bot.state import connect
from bot.state.history import HistoryStore

log = logging.getLogger("chorus.router")

CLAIM_LEASE_MS = 2000  # short for the test; production: ~60 s, renewed every lease / 3


class SlowScripted(ScriptedProvider):
    """Echoes the last message after ``work_ms`` of simulated (awaited) model time."""

    def __init__(self, worker: str, work_ms: int) -> None:
        super().__init__(responder=lambda r: f"{worker}: {r.messages[-1].text[-40:]}")
        self.work = work_ms / 1000

    async def complete(self, request: LLMRequest) -> LLMResponse:
        await asyncio.sleep(self.work)
        return await super().complete(request)


async def main(url: str, namespace: str, name: str, work_ms: int) -> None:
    redis = await connect.open_redis(url)
    bus = RedisStreamsBus(
        redis,
        consumer=name,
        namespace=namespace,
        partitions=8,
        block_ms=100,
        lease_ms=1500,
        claim_idle_ms=5000,
        batch=16,
        max_inflight=64,
    )
    history = HistoryStore(redis, max_messages=10, ttl_seconds=600)
    router = build_router(
        worker_id=name,
        bus=bus,
        redis=redis,
        history=history,
        assembler=PromptAssembler(model="scripted", system_prompt="SYSTEM"),
        agent=Agent(SlowScripted(name, work_ms)),
        commands=Commands(history),
        limits=RouterLimits(claim_lease_ms=CLAIM_LEASE_MS),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    running = asyncio.create_task(router.run())
    print("ready", flush=True)
    await stop.wait()
    await router.shutdown(grace=10)  # as ``chorus`` stops: turns first, then the partitions
    await bus.close()
    await asyncio.gather(running, return_exceptions=True)
    await redis.aclose()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(
        main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4:5] and sys.argv[4] or 20))
    )
