"""Knowledge bases in Redis: each base's chunks, their vectors, its version and what it was built
from, and the lock that lets one process at a time rebuild it.

Per base (``keys.knowledge``): ``chunks`` (one JSON value: the embedding model and the chunks),
``vec`` (a hash, chunk number -> vector), ``status`` (the last check: when, its outcome, the
documents it found and the sources it could not read, for the dashboard), ``version`` (a counter a rebuild increments: a turn's
read carries it, ``bot.state.turn.TurnQuery.knowledge_base``, so a process reloads a base only
when it moved), ``sources`` (the marks of the files and pages it was built from) and ``lock``.
The chunks' shape is ``bot.memory.knowledge``'s; this module only stores it. A rebuild replaces
chunks and vectors and moves the version in one transaction, so a reader never sees the chunks
of one version with the vectors of another. On a Redis Cluster a base's keys share one slot (the
base is their hash tag in the cluster layout), so those transactions run there unchanged.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bot.state import keys
from bot.state.client import Redis

STATUS_PROBLEMS = 50  # problems kept per check


@dataclass(frozen=True)
class StoredIndex:
    """A base as stored: its version, its chunks' JSON and its vectors by chunk number."""

    version: int
    chunks: str
    vectors: Mapping[str, str]


class KnowledgeStore:
    """The knowledge bases of a deployment."""

    def __init__(self, redis: Redis) -> None:
        self.redis = redis

    async def version(self, base: str) -> int:
        return int(str(await self.redis.get(keys.knowledge(base, "version")) or 0))

    async def load(self, base: str) -> StoredIndex | None:
        """The base, read in one transaction (None: never built)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.get(keys.knowledge(base, "version"))
            pipe.get(keys.knowledge(base, "chunks"))
            pipe.hgetall(keys.knowledge(base, "vec"))
            version, raw, vectors = await pipe.execute()
        if version is None or raw is None:
            return None
        return StoredIndex(
            int(version), _text(raw), {_text(k): _text(v) for k, v in dict(vectors).items()}
        )

    async def save(self, base: str, chunks: str, vectors: Mapping[str, str]) -> int:
        """Replace the base's chunks and vectors, in one transaction; its new version."""
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.knowledge(base, "chunks"), chunks)
            pipe.delete(keys.knowledge(base, "vec"))
            if vectors:
                mapping: dict[Any, Any] = dict(vectors)  # (redis-py's mapping type is invariant)
                pipe.hset(keys.knowledge(base, "vec"), mapping=mapping)
            pipe.incr(keys.knowledge(base, "version"))
            results = await pipe.execute()
        return int(results[-1])

    async def lock(self, base: str, token: str, ttl_ms: int) -> bool:
        """Take the base's rebuild lock for ``ttl_ms`` (False: another process holds it)."""
        return bool(await self.redis.set(keys.knowledge(base, "lock"), token, nx=True, px=ttl_ms))

    async def sources(self, base: str) -> str | None:
        """The marks of what the base was last built from."""
        found = await self.redis.get(keys.knowledge(base, "sources"))
        return None if found is None else _text(found)

    async def set_sources(self, base: str, marks: str) -> None:
        await self.redis.set(keys.knowledge(base, "sources"), marks)

    async def set_status(
        self,
        base: str,
        outcome: str,
        documents: int,
        problems: Sequence[str],
        built: Mapping[str, Any] | None = None,
    ) -> None:
        """The last check of the base: now, its outcome, its documents, what it skipped, and
        what the index holds (``built``: chunks, vectors, model; kept from the last build
        when the check changed nothing)."""
        key = keys.knowledge(base, "status")
        if built is None:
            raw = await self.redis.get(key)
            old = json.loads(_text(raw)) if raw is not None else {}
            built = {k: old[k] for k in ("chunks", "vectors", "model") if k in old}
        status = {
            "at": time.time(),
            "outcome": outcome,
            "documents": documents,
            "problems": list(problems)[:STATUS_PROBLEMS],
            **built,
        }
        await self.redis.set(key, json.dumps(status))

    async def status_many(self, bases: Sequence[str]) -> list[dict[str, Any] | None]:
        """Each base's last check and version (None: neither) in one round trip: ``{"at",
        "outcome", "documents", "problems", "chunks", "vectors", "model", "version"}``."""
        if not bases:
            return []
        # a pipeline of GETs, not one MGET: on a Redis Cluster the bases hash to several slots
        # (redis-py sends each node its GETs at once); one round trip on a single Redis either way
        async with self.redis.pipeline(transaction=False) as pipe:
            for base in bases:
                pipe.get(keys.knowledge(base, "status"))
                pipe.get(keys.knowledge(base, "version"))
            found = await pipe.execute()
        out: list[dict[str, Any] | None] = []
        for raw, version in zip(found[::2], found[1::2], strict=True):
            if raw is None and version is None:
                out.append(None)
                continue
            status: dict[str, Any] = json.loads(_text(raw)) if raw is not None else {}
            out.append(status | {"version": int(_text(version)) if version is not None else 0})
        return out


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
