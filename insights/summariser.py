"""The summary pass of the insights worker: claim due conversations, summarise, store.

Per conversation (``bot.state.summaries.SummaryQueue`` leases it): read its history (the window
and the lines kept past it), summaries and notes (one pipelined read) -> pick the lines that are
ready (``summarise.due_lines``) -> check the channel's daily insights budget (spent: try after
the day ends) -> one summary call per day, then the community call if the scope has it ->
charge the tokens -> write (``summarise.composer`` through ``SummaryStore.write``). An answer
invalid twice consumes nothing: the lines wait for a retry after ``RETRY_AFTER``, like after an
outage. A conversation whose history is gone (``/reset``, expired, erased) is no longer due: its
lines lived only as long as the history. A provider outage keeps the lines and retries after a
delay; any other failure is logged with its traceback and the conversation retried after the
same delay, so one bad conversation never stalls the others and no line is dropped. Each model
call has an overall deadline (CHORUS_BACKGROUND_MODEL_DEADLINE): past it the conversation is
retried after the same delay (outcome ``deadline``, logged and counted), so a stuck provider
cannot hold the worker. Past the daily cost cap (the worker's provider and embedder reserve each
call: ``bot.ops.model_calls``) the conversation waits for the next UTC day (``over_cost_cap``,
logged and counted); its lines stay.

With an embedding model (CHORUS_EMBEDDING_MODEL) each run that finds summaries also stores the
vectors of the summaries' and notes' texts (``store_vectors``: only the new texts are embedded,
the gone ones pruned) so the reply path can rank them by meaning without computing any. That is
after the summary is written: an embedding failure loses no summary (lexical relevance still
finds it; logged, ``chorus_insights_jobs{outcome="vectors_error"}``, retried on the next run).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime, timedelta

from pydantic import ValidationError

from bot.events import ConversationKey, utcnow
from bot.llm.base import Provider
from bot.llm.errors import LLMError
from bot.llm.types import Usage
from bot.memory.buffers import MemorySettings
from bot.memory.summaries import (
    Community,
    day_of,
    load_community,
    load_summaries,
    next_day_due,
)
from bot.memory.vectors import Embedder, store_vectors
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.ops.model_calls import CostCapReached
from bot.state import keys
from bot.state.connect import Client
from bot.state.history import HistoryEntry
from bot.state.insight_jobs import Budget
from bot.state.summaries import DEFAULT_QUEUE, ConversationJob, SummaryQueue, SummaryStore
from bot.state.vectors import VectorStore
from insights.community import CommunityAnswer, community_request, merge_notes, sourced_notes
from insights.summarise import (
    SummaryAnswer,
    after_mark,
    ask,
    authors,
    composer,
    due_lines,
    json_answer,
    summary_request,
    turn_days,
)

log = logging.getLogger("chorus.insights.summaries")

Clock = Callable[[], datetime]
RETRY_AFTER = timedelta(minutes=5)


class Summariser:
    def __init__(
        self,
        redis: Client,
        provider: Provider,
        model: str,
        settings: MemorySettings,
        budget: Budget,
        *,
        history_max: int,
        clock: Clock = utcnow,
        batch: int = 4,
        lease_seconds: float = 300.0,
        queue: str = DEFAULT_QUEUE,
        metrics: MetricsSink | None = None,
        embedder: Embedder | None = None,
    ) -> None:
        self.redis = redis  # the vectors' store
        self.summaries = SummaryStore(redis)
        self.embedder = embedder
        self.provider = provider
        self.model = model
        self.settings = settings
        self.budget = budget
        self.history_max = history_max
        self.deadline = settings.background_deadline  # of each model call
        self.batch = batch
        self.metrics: MetricsSink = metrics or NullMetrics()
        self._clock = clock
        self.queue = SummaryQueue(
            redis,
            default_ttl_days=settings.summary_ttl_days,
            lease_seconds=lease_seconds,
            queue=queue,
        )

    async def run_once(self, now: datetime | None = None) -> list[tuple[str, str]]:
        """Summarise the conversations due at ``now``; returns (conversation, outcome) pairs."""
        now = now or self._clock()
        done = []
        for job in await self.queue.claim_due(now, self.batch):
            try:
                outcome = await self._summarise(job, now)
                if outcome in ("summarised", "nothing_ready"):
                    await self.embed(job.conversation, job.ttl_days)
            except LLMError:
                log.warning("summary model failed; retrying later", exc_info=True)
                await self.queue.later(job, now + RETRY_AFTER)
                outcome = "retry"
            except CostCapReached as exc:
                log.warning(
                    "daily cost cap reached; summary waits for the next UTC day",
                    extra={"conversation": str(job.conversation), "delay": exc.resets_in},
                )
                self.metrics.insights_job("over_cost_cap")
                await self.queue.later(job, now + timedelta(seconds=exc.resets_in))
                outcome = "over_cost_cap"
            except TimeoutError:
                log.warning(
                    "summary model call passed its deadline; retrying later",
                    extra={"conversation": str(job.conversation), "deadline": self.deadline},
                )
                self.metrics.insights_job("deadline")
                await self.queue.later(job, now + RETRY_AFTER)
                outcome = "deadline"
            except Exception:
                log.exception("summary job failed; retrying later")
                await self.queue.later(job, now + RETRY_AFTER)
                outcome = "failed"
            log.info(
                "summary job done",
                extra={"conversation": str(job.conversation), "outcome": outcome},
            )
            done.append((str(job.conversation), outcome))
        return done

    async def embed(self, conv: ConversationKey, ttl_days: int) -> int:
        """Store the vectors of ``conv``'s summaries and notes that lack one (none without an
        embedding model); returns how many were embedded. Never raises for the embedder."""
        if self.embedder is None:
            return 0
        stored = await self.summaries.read(conv)
        texts = [s.text for s in load_summaries(stored.summaries)]
        texts += [n.text for n in load_community(stored.notes).notes]
        key = keys.summary("vec", conv)
        try:
            return await store_vectors(
                VectorStore(self.redis), self.embedder, key, texts, ttl_seconds=ttl_days * 24 * 3600
            )
        except TimeoutError:
            self.metrics.insights_job("deadline")
            log.warning(
                "embedding a conversation's summaries passed its deadline; retried next run",
                extra={"conversation": str(conv), "deadline": self.deadline},
            )
            return 0
        except CostCapReached:
            self.metrics.insights_job("over_cost_cap")
            log.warning(
                "daily cost cap reached; a conversation's summaries are embedded on a later run",
                extra={"conversation": str(conv)},
            )
            return 0
        except Exception as exc:
            self.metrics.insights_job("vectors_error")
            log.warning(
                "could not embed a conversation's summaries; lexical relevance until next run",
                extra={"conversation": str(conv), "error": str(exc)},
            )
            return 0

    async def _summarise(self, job: ConversationJob, now: datetime) -> str:
        conv = job.conversation
        started = self._clock()
        raw_lines, stored = await self.summaries.read_with_lines(conv)
        raw_sum, raw_notes = stored.summaries, stored.notes
        if not raw_lines:  # the history is gone (/reset, expiry, erasure): so are its lines
            await self.summaries.drop_job(conv)
            await self.queue.finish(job, None)
            return "no_history"
        lines = []
        for raw in raw_lines:
            try:
                lines.append((raw, HistoryEntry.model_validate_json(raw)))
            except ValidationError:
                log.warning("unreadable history line skipped", extra={"conversation": str(conv)})
        window = {raw for raw, _ in lines[-self.history_max :]}
        pending = after_mark(lines, job.mark)
        # Lines summarised while in the window that have slid out of it since: not needed (but
        # the mark stays: it is where the next run starts).
        waiting = {raw for raw, _ in pending}
        stale = [
            raw for raw, _ in lines if raw not in waiting and raw not in window and raw != job.mark
        ]
        ready = due_lines(pending, window, day_of(now))
        if ready == 0:
            if stale:
                await self.summaries.remove_lines(conv, stale)
            await self.queue.finish(job, next_day_due(now) if pending else None)
            return "nothing_ready"
        spent = await self.budget.channel_exhausted(conv.platform, conv.channel, now)
        if spent is not None:
            log.warning(
                "insights budget spent for today; summary waits for tomorrow",
                extra={"conversation": str(conv), "used": spent.used, "limit": spent.limit},
            )
            await self.queue.later(job, now + timedelta(hours=1))
            return "skipped_budget"
        batch = [entry for _, entry in pending[:ready]]
        by_day: dict[str, list[HistoryEntry]] = {}
        for entry, day in zip(batch, turn_days(batch), strict=True):
            by_day.setdefault(day, []).append(entry)
        summaries = {s.day: s for s in load_summaries(raw_sum)}
        usage = Usage()
        days: dict[str, tuple[str, list[HistoryEntry]]] = {}
        for day, entries in by_day.items():
            request = summary_request(self.model, conv, day, summaries.get(day), entries)
            async with asyncio.timeout(self.deadline):
                answer, used = await ask(self.provider, request, json_answer(SummaryAnswer))
            usage = usage + used
            if answer is None:  # invalid twice: nothing is consumed, the lines are tried later
                await self.budget.charge_channel(conv.platform, conv.channel, _tokens(usage), now)
                await self.queue.later(job, now + RETRY_AFTER)
                return "invalid"
            days[day] = (answer.summary, entries)
        update = None
        if job.community:
            current = load_community(raw_notes)
            request = community_request(self.model, conv, current, batch)
            async with asyncio.timeout(self.deadline):
                found, used = await ask(self.provider, request, json_answer(CommunityAnswer))
            usage = usage + used
            if found is not None:
                notes, _ = sourced_notes(found, batch)
                mood = found.mood

                def update_notes(stored: Community) -> Community:
                    return merge_notes(stored, notes, mood, batch, now)

                update = update_notes
        self.metrics.tokens(self.model, usage)
        tokens = _tokens(usage)
        await self.budget.charge_channel(conv.platform, conv.channel, tokens, now)
        compose = composer(
            days=days,
            community=update,
            remove=stale + [raw for raw, _ in pending[:ready] if raw not in window],
            # Summarised lines past the window leave the history; the mark is needed only when
            # the last one summarised stays (in the window), else every line left is new.
            mark=next((raw for raw, _ in reversed(pending[:ready]) if raw in window), ""),
            users=authors(batch),
            ttl_days=job.ttl_days,
            job_ttl=self.settings.history_ttl_seconds,
            now=now,
        )
        written = await self.summaries.write(conv, compose, authors=authors(batch), started=started)
        if not written:
            await self.queue.release(job)
            return "forgotten"
        # Due again after the next day's end while lines wait (or may have come in meanwhile).
        await self.queue.finish(job, next_day_due(now))
        log.info(
            "conversation summarised",
            extra={"conversation": str(conv), "lines": ready, "days": len(days), "tokens": tokens},
        )
        return "summarised"


def _tokens(usage: Usage) -> int:
    return usage.total_input_tokens + usage.output_tokens
