"""Asking for an analysis from the reply path: the core's half of the insights queue.

After each answered turn the router asks for an analysis of the speaker. The core must never
import the ``insights`` package, yet the request has to ride in the turn's one commit, so the
job model and ``due`` (the request, as a change of that commit: due after the debounce, at the
latest after the maximum delay) live here; the queue itself -- its layout, claiming, finishing,
putting off -- is ``bot.state.insight_jobs``.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from bot.events import AwareDatetime, ChatMessage, ConversationKey, utcnow
from bot.state.insight_jobs import CONVERSATION_FIELD, DEFAULT_QUEUE, JOB_TTL_SECONDS, TurnRef
from bot.state.turn import InsightDue


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


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)
