"""``chorus knowledge status|index``: what each configured knowledge base holds, and indexing
on demand (the running bot also checks its sources on a schedule and on ``chorus reload``).

Why a command: an operator who just wrote the FAQ wants to see it chunked and stored without
restarting the bot or waiting for the next check. It works on the store the bot uses
(CHORUS_REDIS_URL): a Redis server, or the embedded store's data directory while the bot is
stopped (one process uses a data directory at a time); with ``memory://`` there is nothing
shared to show.
"""

from __future__ import annotations

import sys

from bot.knowledge.wiring import RecallParts, knowledge_lists
from bot.memory.knowledge import base_id, load_index
from bot.ops.model_calls import CostCapReached
from bot.settings import Settings
from bot.state import connect
from bot.state.connect import Client
from bot.state.knowledge import KnowledgeStore


async def knowledge_command(settings: Settings, action: str) -> int:
    """Print one line per knowledge base; ``index`` brings each up to date first. Embedding
    counts against the daily cost cap: once it is reached, indexing stops there (exit 1)."""
    bases = knowledge_lists(settings)
    if not bases:
        print("no knowledge base is configured (CHORUS_KNOWLEDGE_PATHS or a scope's knowledge)")
        return 0
    redis = await connect.open_state(settings.state)
    parts = RecallParts.build(settings, redis)
    try:
        for sources in bases:
            if action == "index" and parts.indexer is not None:
                try:
                    report = await parts.indexer.index(sources, force=True)
                except CostCapReached as exc:
                    print(
                        f"chorus knowledge: {base_id(sources)} not indexed: {exc}", file=sys.stderr
                    )
                    return 1
                state = "re-indexed" if report.changed else "unchanged"
                print(f"{report.base}: {state}, {report.embedded} chunks embedded")
            print(await _status(redis, sources))
    finally:
        await parts.aclose()
        await redis.aclose()
    return 0


async def _status(redis: Client, sources: tuple[str, ...]) -> str:
    base = base_id(sources)
    index = await load_index(KnowledgeStore(redis), base)
    if index is None:
        return f"{base}: not indexed yet ({', '.join(sources)})"
    files = len({chunk.source for chunk in index.chunks})
    vectors = sum(1 for v in index.vectors if v)
    model = index.model or "none: keyword search"
    return (
        f"{base}: version {index.version}, {len(index.chunks)} chunks from {files} documents, "
        f"{vectors} vectors (model {model}); sources: {', '.join(sources)}"
    )
