"""Where each streamed answer's live message is, in Redis, so a restarted gateway finishes it.

A gateway shows a streamed answer by editing one message (``bot.platform.streaming``). The
message's identity (Slack's ``ts`` and whether its stream is open, Discord's message ids) used
to live only in that process: a gateway killed mid-stream left the partial message, and the one
that replaced it posted the final answer as a second message. ``LiveAnswers`` now saves the
identity here when the live message is created or changes (one small ``SET ... EX`` per change,
not per draft) and reads it back when a restarted gateway gets drafts or the final reply of an
answer it never showed; the key goes when the answer is final.

Why a TTL and no cleanup job: an answer whose final never came is forgotten by Redis after
``ttl`` (the gateway forgets it after the same time). Why failures are swallowed: this is
a convenience on top of a correct answer; Redis being away costs at most a second message, never
the answer, and never a stalled outbound loop (each call has a short timeout).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from typing import Any

from bot.state import keys
from bot.state.client import Redis

log = logging.getLogger("chorus.state.draft_messages")

TTL_SECONDS = 900  # as long as a gateway remembers an unfinished answer
CALL_TIMEOUT = 2.0  # seconds; a slower Redis is treated as away for this call


class LiveMessages:
    """One platform's saved live messages (``AnswerStore`` of ``bot.platform.streaming``)."""

    def __init__(
        self,
        redis: Redis,
        platform: str,
        *,
        namespace: str = "main",
        ttl: int = TTL_SECONDS,
        timeout: float = CALL_TIMEOUT,
    ) -> None:
        self.redis = redis
        self.platform = platform
        self.namespace = namespace
        self.ttl = ttl
        self.timeout = timeout
        self.failures = 0  # calls that failed or timed out (each logged)

    def key(self, answer: tuple[str, str]) -> str:
        conversation, reply_to_id = answer
        return keys.live_answer(self.platform, conversation, reply_to_id, self.namespace)

    async def save(self, answer: tuple[str, str], state: Mapping[str, Any]) -> None:
        text = json.dumps(dict(state), separators=(",", ":"), sort_keys=True)
        await self._call("save", self.redis.set(self.key(answer), text, ex=self.ttl))

    async def load(self, answer: tuple[str, str]) -> dict[str, Any] | None:
        raw = await self._call("load", self.redis.get(self.key(answer)))
        if not raw:
            return None
        try:
            found = json.loads(raw)
        except ValueError:
            log.warning("unreadable saved live message; ignored", extra={"key": self.key(answer)})
            return None
        return found if isinstance(found, dict) else None

    async def forget(self, answer: tuple[str, str]) -> None:
        await self._call("forget", self.redis.delete(self.key(answer)))

    async def _call(self, what: str, call: Any) -> Any:
        try:
            async with asyncio.timeout(self.timeout):
                return await call
        except Exception as exc:
            self.failures += 1
            log.warning(
                "could not reach redis for a live message; the answer still goes out",
                extra={"operation": what, "error": f"{type(exc).__name__}: {exc}"[:200]},
            )
            return None
