"""The audit trail: every moderation, user-list and quota decision, in a bounded Redis stream and
in counters.

Why a stream: decisions come from every worker and must be readable in one place, in order, by
the admin tools that come later (``read_audit``); ``XADD MAXLEN ~`` keeps it bounded without a
sweep. Why never the text: the trail keeps who (user id and name), where (conversation), which
rule (``slur:slurs.txt:3``) and what happened (refused, replaced, limited...), plus the text's
length and a short fingerprint (to see that one text was sent twice), so the trail itself never
repeats a slur, a doxx or a leaked prompt.

Why a keyed fingerprint: a flagged text is often short and guessable (a phone number has about
10^10 values), so a plain hash of it could be reversed by trying every candidate. The print is
an HMAC-SHA256 (64 bits kept) under a key derived from the deployment's secret
(``bot.safety.canary.deployment_secret``: ``CHORUS_SAFETY_CANARY_SECRET``, else the model
keys), which lives only in the environment of the deployment's processes, never in Redis: whoever
reads the trail without that secret cannot test a guess. Every worker derives the same key, so
equal texts still give equal prints across the deployment. Rotating the secret only means that
prints made before and after no longer match. A deployment with no secret at all records no
print (``fingerprint_key`` is None).

``forget_user`` deletes one identity's entries (``/forget``): the decisions about its messages.
An entry a moderator's command wrote (``user_block:<id>``) is the moderator's and stays.

Writes happen off the message path: ``record`` counts at once and hands the ``XADD`` to a
tracked background task, so a flagged message costs the turn no round trip. A write that fails
is logged and counted (``chorus_safety_audit_failures_total``); the decision stands.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import time
from collections import Counter
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from bot.events import ChatMessage
from bot.ops.metrics import Metrics, NullMetrics
from bot.state.connect import Client
from bot.state.moderation import AuditStore

log = logging.getLogger("chorus.safety")


def fingerprint_key(secret: str) -> bytes | None:
    """The fingerprint key derived from the deployment's secret (None: no secret, no prints)."""
    if not secret:
        return None
    return hmac.new(secret.encode(), b"chorus-audit-fingerprint", hashlib.sha256).digest()


def fingerprint(text: str, key: bytes) -> str:
    """A short keyed fingerprint of a text: equal texts, equal prints under one key; without
    the key a guess cannot be checked against it."""
    return hmac.new(key, text.encode("utf-8", "replace"), hashlib.sha256).hexdigest()[:16]


class AuditEntry(BaseModel):
    """One decision. ``direction``: ``in`` (a message), ``out`` (an answer), ``user`` (the
    author's block entry), ``quota``, ``command`` (a moderator's change), ``model`` (the
    moderation model failed), ``act`` (a moderation action on the platform: ``rule`` is the
    action, ``action`` its outcome, ``actor`` who asked, ``reason`` why)."""

    model_config = ConfigDict(frozen=True)

    at_ms: int
    direction: str
    rule: str
    action: str
    platform: str = ""
    conversation: str = ""
    user_id: str = ""
    user_name: str = ""
    message_id: str = ""
    chars: int = 0
    fingerprint: str = ""
    actor: str = ""
    reason: str = ""
    detail: str = ""  # a dashboard change: what it changed, before -> after (secrets masked)

    @classmethod
    def about(
        cls,
        message: ChatMessage,
        *,
        direction: str,
        rule: str,
        action: str,
        text: str | None = None,
        key: bytes | None = None,
    ) -> AuditEntry:
        """An entry about ``message``; ``text`` (the flagged text) only gives its length and,
        with the deployment's ``key``, its print."""
        return cls(
            at_ms=int(time.time() * 1000),
            direction=direction,
            rule=rule,
            action=action,
            platform=message.platform,
            conversation=str(message.conversation),
            user_id=message.author.id,
            user_name=message.author.display_name,
            message_id=message.id,
            chars=len(text) if text is not None else 0,
            fingerprint=fingerprint(text, key) if text and key else "",
        )

    def fields(self) -> dict[str, str]:
        return {name: str(value) for name, value in self.model_dump().items()}


class Audit:
    """Records decisions: counters now, the stream entry in the background."""

    def __init__(
        self,
        redis: Client | None,
        *,
        namespace: str = "main",
        max_entries: int = 10_000,
        fingerprint_key: bytes | None = None,
    ) -> None:
        self.redis = redis  # (what ``forget_user`` erases through)
        self.store = (
            AuditStore(redis, namespace=namespace, max_entries=max_entries)
            if redis is not None
            else None
        )
        self.fingerprint_key = fingerprint_key
        self.namespace = namespace
        self.decisions: Counter[tuple[str, str, str]] = Counter()  # (direction, rule, action)
        self.failures: Counter[str] = Counter()  # the moderation model's, by reason
        self.write_failures = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def register(self, metrics: Metrics | NullMetrics) -> None:
        """Serve the counters on ``/metrics``."""
        metrics.register_gauge_callback(
            "chorus_safety_decisions",
            "Moderation, user-list and quota decisions (direction, rule kind, action)",
            ("direction", "rule", "action"),
            lambda: {k: float(v) for k, v in self.decisions.items()},
            kind="counter",
        )
        metrics.register_gauge_callback(
            "chorus_moderation_failures",
            "Moderation model calls that failed or timed out (the block lists decided alone)",
            ("reason",),
            lambda: {(k,): float(v) for k, v in self.failures.items()},
            kind="counter",
        )
        metrics.register_gauge_callback(
            "chorus_safety_audit_failures",
            "Audit entries that could not be written to Redis",
            (),
            lambda: float(self.write_failures),
            kind="counter",
        )

    def record(self, entry: AuditEntry) -> None:
        """Count ``entry`` and write it to the stream in the background."""
        kind = entry.rule.split(":", 1)[0]
        self.decisions[entry.direction, kind, entry.action] += 1
        log.info(
            "safety decision",
            extra={
                "direction": entry.direction,
                "rule": entry.rule,
                "action": entry.action,
                "conversation": entry.conversation,
                "user_id": entry.user_id,
                "message_id": entry.message_id,
            },
        )
        if self.store is None:
            return
        task = asyncio.create_task(self._write(self.store, entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def record_action(
        self,
        *,
        platform: str,
        conversation: str,
        action: str,
        outcome: str,
        user_id: str = "",
        message_id: str = "",
        actor: str = "",
        reason: str = "",
    ) -> None:
        """Record a moderation action taken on a platform (``bot.platform.moderation``'s
        ``ActionAudit``): who asked, on whom, what, why, and what came of it."""
        self.record(
            AuditEntry(
                at_ms=int(time.time() * 1000),
                direction="act",
                rule=action,
                action=outcome,
                platform=platform,
                conversation=conversation,
                user_id=user_id,
                message_id=message_id,
                actor=actor,
                reason=reason[:200],
            )
        )

    def model_failed(self, reason: str) -> None:
        self.failures[reason] += 1

    async def _write(self, store: AuditStore, entry: AuditEntry) -> None:
        try:
            await store.append(entry.fields())
        except Exception:
            self.write_failures += 1
            log.warning("could not write an audit entry", exc_info=True)

    async def flush(self) -> None:
        """Wait for the writes in flight (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)


async def read_audit(
    redis: Client, *, namespace: str = "main", count: int = 100
) -> list[AuditEntry]:
    """The newest ``count`` entries, oldest first: what the admin tools read."""
    rows = await AuditStore(redis, namespace=namespace).newest(count)
    return [AuditEntry.model_validate(fields) for fields in rows]


async def forget_user(
    redis: Client, platform: str, user_id: str, *, namespace: str = "main"
) -> int:
    """Delete every entry about ``user_id`` on ``platform`` (the decisions about their messages,
    their links); returns how many."""

    def theirs(fields: Mapping[str, str]) -> bool:
        return bool(fields.get("user_id") == user_id and fields.get("platform") == platform)

    return await AuditStore(redis, namespace=namespace).erase(theirs)
