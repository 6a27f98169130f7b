"""Enqueueing insights jobs from the reply path: the core's half of the insights queue.

After each answered turn the router asks for an analysis of the speaker. The core must never
import the ``insights`` package, yet the enqueue has to ride in the turn's one commit, so the job
model and ``due`` (the enqueue, as a change of that commit) live here; ``insights/jobs.py``
claims, completes and reschedules.

Debounce without Lua: one job per user (deterministic id ``keys.insights_member``), kept in two
sorted sets. ``due`` holds "last turn + CHORUS_INSIGHTS_DEBOUNCE" and is pushed later by every
turn (``ZADD GT``), so a burst of turns collapses into one analysis after the burst; ``deadline``
holds "first pending turn + CHORUS_INSIGHTS_MAX_DELAY" (``ZADD NX``), so a conversation that never
pauses is still analysed. A job is due when either score has passed. The job's hash remembers
the conversations it covers and a turn counter (``rev``) that tells the worker whether turns
arrived while it was busy.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio import Redis
from redis.asyncio.client import Pipeline

from bot.events import AwareDatetime, ChatMessage, ConversationKey, utcnow
from bot.state import keys
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import InsightDue, TurnChanges

DEFAULT_QUEUE = "main"  # a deployment or a test may use its own queue name
JOB_TTL_SECONDS = 2 * 24 * 3600
CANCEL_COMMANDS = 3
CONVERSATION_FIELD = "c:"
OUTCOMES_MAX = 200
OUTCOMES_SECONDS = 7 * 24 * 3600


class TurnRef(BaseModel):
    """The last turn of a user in one conversation, as stored in the job hash."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    message_id: str
    at: AwareDatetime


class InsightJob(BaseModel):
    """A request to analyse one user after one answered turn."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    platform: str = Field(min_length=1, max_length=32, pattern=r"^[a-z0-9_]+$")
    user_id: str = Field(min_length=1, max_length=256)
    display_name: str = Field(default="", max_length=256)
    conversation: ConversationKey
    message_id: str = Field(min_length=1, max_length=256)
    at: AwareDatetime = Field(default_factory=utcnow)

    @classmethod
    def for_message(cls, message: ChatMessage) -> InsightJob:
        return cls(
            platform=message.platform,
            user_id=message.author.id,
            display_name=message.author.display_name,
            conversation=message.conversation,
            message_id=message.id,
            at=message.sent_at,
        )


def due(
    job: InsightJob,
    *,
    debounce: float,
    max_delay: float,
    now: datetime | None = None,
    queue: str = DEFAULT_QUEUE,
) -> InsightDue:
    """``job`` as a change of the turn's commit: due ``debounce`` after this turn (later turns
    push it later), at the latest ``max_delay`` after the first pending one."""
    now_ms = _ms(now or utcnow())
    return InsightDue(
        platform=job.platform,
        user_id=job.user_id,
        display_name=job.display_name,
        conversation=job.conversation,
        ref=TurnRef(message_id=job.message_id, at=job.at).model_dump_json(),
        due_ms=now_ms + round(debounce * 1000),
        deadline_ms=now_ms + round(max_delay * 1000),
        ttl_seconds=JOB_TTL_SECONDS,
        queue=queue,
        conversation_field=CONVERSATION_FIELD,
    )


async def enqueue(
    redis: Redis,
    job: InsightJob,
    *,
    debounce: float,
    max_delay: float,
    now: datetime | None = None,
    queue: str = DEFAULT_QUEUE,
) -> None:
    """``due``, written now (outside a turn: tests, tools)."""
    change = due(job, debounce=debounce, max_delay=max_delay, now=now, queue=queue)
    await RedisTurnStore(redis).write(TurnChanges(insight=change))


def queue_cancel(
    pipe: Pipeline, platform: str, user_id: str, *, queue: str = DEFAULT_QUEUE
) -> None:
    """Queue the removal of a user's pending job (``CANCEL_COMMANDS`` = 3), e.g. on /forget."""
    member = keys.insights_member(platform, user_id)
    pipe.delete(keys.insights_job(platform, user_id, queue))
    pipe.zrem(keys.insights_due(queue), member)
    pipe.zrem(keys.insights_deadline(queue), member)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


async def record_outcome(
    redis: Redis,
    platform: str,
    user_id: str,
    outcome: str,
    at: datetime,
    *,
    queue: str = DEFAULT_QUEUE,
) -> None:
    """Note how an analysis ended (merged, unchanged, skipped...) for the admin dashboard: ids
    and the outcome only, never what was learnt."""
    key = keys.insights_outcomes(queue)
    entry = {"at": at.timestamp(), "platform": platform, "user_id": user_id, "outcome": outcome}
    async with redis.pipeline(transaction=False) as pipe:
        pipe.lpush(key, json.dumps(entry))
        pipe.ltrim(key, 0, OUTCOMES_MAX - 1)
        pipe.expire(key, OUTCOMES_SECONDS)
        await pipe.execute()


async def recent_outcomes(
    redis: Redis, *, queue: str = DEFAULT_QUEUE, limit: int = 25
) -> list[dict[str, Any]]:
    """The latest ``limit`` outcomes, newest first (unreadable entries skipped)."""
    rows = cast("list[str]", await redis.lrange(keys.insights_outcomes(queue), 0, limit - 1))
    found = []
    for row in rows:
        try:
            found.append(dict(json.loads(row)))
        except (ValueError, TypeError):
            continue
    return found
