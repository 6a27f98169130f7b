"""The insights worker: claim due jobs, analyse each user, merge the result into their buffer.

It runs as an in-process task by default or as its own process (``chorus insights``); several
may run against one Redis, since a user is only ever leased to one of them. The reply path never
waits for it: the router only enqueues (``bot.memory.insight_queue``).

Per job: budget check (skip and log when today's tokens are spent) -> load the conversations'
recent history and the user's buffer -> one model call with structured output (one retry if the
answer is invalid, then drop) -> charge the tokens -> keep only proposals sourced from the
user's own lines -> merge under ``WATCH`` (unless the user said ``/forget`` since the analysis
began) -> complete. A provider outage keeps the job and retries it later with jittered
exponential backoff, up to ``max_attempts``; so does an analysis past its overall deadline
(CHORUS_BACKGROUND_MODEL_DEADLINE, and never past the job's lease: outcome ``deadline``), so a
stuck provider cannot hold the job; any other failure is logged with its traceback and dropped,
so one bad job never stalls the queue. Embedding calls have the same deadline (``Bounded``).
Under a daily cost cap (``bot.ops.model_calls``) every model and embedding call is reserved
before it is made and charged after; once the cap is reached the analysis is refused before any
call (``over_cost_cap``, logged and counted) and the job waits for the next UTC day, without
counting an attempt.

Each pass also runs the summary pass (``insights.summariser``: conversation summaries and
community notes), on the same model and budgets, when CHORUS_SUMMARIES is on.

``run_once(now)`` does one pass and is what tests drive; ``run`` loops over it and waits only
for the next due time (or the poll interval, since other processes enqueue too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum

from bot.events import utcnow
from bot.llm.base import Provider
from bot.llm.errors import LLMError, ProviderUnavailable
from bot.memory.buffers import MemorySettings, MemoryStore, UserBuffer
from bot.memory.enrichment import note_texts
from bot.memory.vectors import Embedder, bounded, store_vectors
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.ops.model_calls import CostCapReached, Spend, metered_embedder
from bot.resilience import RetryPolicy
from bot.state import keys
from bot.state.connect import Client
from bot.state.history import HistoryStore
from bot.state.insight_jobs import DEFAULT_QUEUE, Budget, ClaimedJob, JobQueue, record_outcome
from bot.state.vectors import VectorStore
from insights.analyse import analyse, build_request, check_provenance, label_lines
from insights.merge import MergeReport, merge
from insights.summariser import Summariser

log = logging.getLogger("chorus.insights")

Clock = Callable[[], datetime]


class JobOutcome(StrEnum):
    MERGED = "merged"  # the buffer was written
    UNCHANGED = "unchanged"  # nothing new to remember
    SKIPPED_BUDGET = "skipped_budget"
    NOTHING_TO_READ = "nothing_to_read"  # no line of the user's in the history
    INVALID = "invalid"  # invalid answer twice: dropped
    FORGOTTEN = "forgotten"  # /forget since the analysis began: not written
    RETRY = "retry"  # provider outage: rescheduled
    DEADLINE = "deadline"  # the model call passed its overall deadline: rescheduled
    OVER_COST_CAP = "over_cost_cap"  # the daily cost cap is reached: put off until tomorrow
    DROPPED = "dropped"  # a non-retryable error, or too many attempts


class InsightsWorker:
    def __init__(
        self,
        redis: Client,
        provider: Provider,
        model: str,
        history: HistoryStore,
        memory: MemoryStore,
        settings: MemorySettings,
        *,
        clock: Clock = utcnow,
        batch: int = 8,
        lease_seconds: float = 300.0,
        max_attempts: int = 8,
        backoff_base: float = 30.0,
        backoff_cap: float = 3600.0,
        rng: random.Random | None = None,
        queue: str = DEFAULT_QUEUE,
        metrics: MetricsSink | None = None,
        embedder: Embedder | None = None,
        spend: Spend | None = None,
    ) -> None:
        self.metrics: MetricsSink = metrics or NullMetrics()
        # summaries' vectors (and new notes'), each call bounded and, under a cost cap,
        # reserved and charged (``spend``); closed by ``aclose``
        self.embedder = metered_embedder(spend, bounded(embedder, settings.background_deadline))
        if spend is not None:  # every analysis, summary and community call against the cap
            provider = spend.provider(provider, "insights")
        # an analysis's overall deadline: the setting's, and never past the job's lease
        self.deadline = min(settings.background_deadline, lease_seconds * 0.8)
        self.provider = provider
        self.model = model
        self.history = history
        self.memory = memory
        self.settings = settings
        self.queue = JobQueue(
            redis, max_delay=settings.insights_max_delay, lease_seconds=lease_seconds, queue=queue
        )
        self.budget = Budget(
            redis,
            user_daily=settings.insights_user_daily_tokens,
            channel_daily=settings.insights_channel_daily_tokens,
        )
        self.batch = batch
        self.max_attempts = max_attempts
        # Only its delays are used: a job is rescheduled in the queue, not retried in place.
        self.backoff_policy = RetryPolicy(base_delay=backoff_base, max_delay=backoff_cap)
        self._clock = clock
        self._rng = rng or random.Random()
        self._stop = asyncio.Event()
        self._running: asyncio.Task[None] | None = None
        self.summariser: Summariser | None = None
        self.summarised = 0  # conversations the last pass summarised (or looked at)
        if settings.summaries_enabled:
            self.summariser = Summariser(
                redis,
                provider,
                model,
                settings,
                self.budget,
                history_max=history.max_messages,
                clock=clock,
                lease_seconds=lease_seconds,
                queue=queue,
                metrics=self.metrics,
                embedder=self.embedder,
            )

    # -- loop ----------------------------------------------------------------------------------
    async def run(self) -> None:
        """Work until ``aclose``: a pass, then a wait for the next due job or the poll tick."""
        self._running = asyncio.current_task()
        log.info("insights worker started", extra={"model": self.model})
        try:
            while not self._stop.is_set():
                try:
                    done = await self.run_once()
                    summaries = self.summariser.batch if self.summariser else 1
                    busy = len(done) >= self.batch or self.summarised >= summaries
                    wait = 0.0 if busy else await self._idle_wait()
                except Exception:
                    log.exception("insights pass failed; trying again shortly")
                    wait = self.settings.insights_poll_seconds
                if wait > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stop.wait(), timeout=wait)
        finally:
            self._running = None
            log.info("insights worker stopped")

    async def aclose(self, grace: float = 10.0) -> None:
        """Stop ``run`` after the job in hand (cancelling it after ``grace`` seconds; a
        cancelled job's lease expires and another pass picks it up)."""
        self._stop.set()
        task = self._running
        if task is not None and task is not asyncio.current_task():
            done, _ = await asyncio.wait({task}, timeout=grace)
            if not done:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        embedder, self.embedder = self.embedder, None
        if embedder is not None:
            await embedder.aclose()

    async def _idle_wait(self) -> float:
        poll = self.settings.insights_poll_seconds
        due = await self.queue.next_due()
        if due is None:
            return poll
        ahead = (due - self._clock()).total_seconds()
        return poll if ahead <= 0 else min(poll, ahead)  # past due: leased elsewhere

    # -- one pass ------------------------------------------------------------------------------
    async def run_once(self, now: datetime | None = None) -> list[tuple[str, JobOutcome]]:
        """Claim and process the jobs due at ``now``; returns ``(job id, outcome)`` pairs."""
        now = now or self._clock()
        results = []
        for job in await self.queue.claim_due(now, self.batch):
            outcome = await self._process(job, now)
            self.metrics.insights_job(outcome.value)
            log.info(
                "insights job done",
                extra={"platform": job.platform, "job": job.member, "outcome": str(outcome)},
            )
            results.append((job.member, outcome))
            try:  # for the admin dashboard; an analysis never fails for want of it
                await record_outcome(
                    self.memory.redis, job.platform, job.user_id, outcome.value, now,
                    queue=self.queue.queue,
                )  # fmt: skip
            except Exception:
                log.warning("could not note an insights outcome", exc_info=True)
        if self.summariser is not None:  # logs each conversation's outcome
            self.summarised = len(await self.summariser.run_once(now))
        return results

    async def _process(self, job: ClaimedJob, now: datetime) -> JobOutcome:
        try:
            return await self._analyse(job, now)
        except ProviderUnavailable:
            return await self._retry(job, now)
        except TimeoutError:
            return await self._retry(job, now, deadline=True)
        except CostCapReached as exc:
            log.warning(
                "daily cost cap reached; insights analysis waits for the next UTC day",
                extra={"platform": job.platform, "job": job.member, "delay": exc.resets_in},
            )
            await self.queue.retry_later(job, now, exc.resets_in, attempt=False)
            return JobOutcome.OVER_COST_CAP
        except LLMError:
            log.error(
                "insights model refused the request; job dropped",
                extra={"platform": job.platform, "job": job.member},
                exc_info=True,
            )
        except Exception:
            log.exception(
                "insights job failed; dropped", extra={"platform": job.platform, "job": job.member}
            )
        await self.queue.complete(job, now)
        return JobOutcome.DROPPED

    async def _analyse(self, job: ClaimedJob, now: datetime) -> JobOutcome:
        conversations = [conv for conv, _ in job.conversations]
        spent = await self.budget.exhausted(job.platform, job.user_id, conversations, now)
        if spent is not None:
            log.warning(
                "insights budget spent for today; analysis skipped",
                extra={
                    "platform": job.platform,
                    "job": job.member,
                    "scope": spent.scope,
                    "used": spent.used,
                    "limit": spent.limit,
                },
            )
            await self.queue.complete(job, now)
            return JobOutcome.SKIPPED_BUDGET
        started = self._clock()
        histories = [
            (conv, await self.history.load(conv, limit=self.settings.insights_history_lines))
            for conv in conversations
        ]
        lines = label_lines(job.platform, job.user_id, histories)
        if not any(line.own for line in lines):
            await self.queue.complete(job, now)
            return JobOutcome.NOTHING_TO_READ
        buffer = await self.memory.load(job.platform, job.user_id)
        request = build_request(
            self.model,
            platform=job.platform,
            display_name=job.display_name,
            buffer=buffer,
            lines=lines,
        )
        async with asyncio.timeout(self.deadline):
            result = await analyse(self.provider, request)
        self.metrics.tokens(self.model, result.usage)  # the insights model's cost, per model
        tokens = result.usage.total_input_tokens + result.usage.output_tokens
        await self.budget.charge(job.platform, job.user_id, conversations, tokens, now)
        if result.analysis is None:
            await self.queue.complete(job, now)
            return JobOutcome.INVALID
        pins, recs, _ = check_provenance(result.analysis, lines)
        report_holder: list[MergeReport] = []

        def change(current: UserBuffer) -> UserBuffer:
            merged, report = merge(
                current, pins, recs, shown=buffer.pins, now=now, settings=self.settings
            )
            report_holder[:] = [report]
            return merged

        stored = await self.memory.update(
            job.platform, job.user_id, change, unless_forgotten_since=started
        )
        await self.queue.complete(job, now)
        if stored is None:
            return JobOutcome.FORGOTTEN
        report = report_holder[0]
        log.info(
            "insights merged",
            extra={
                "platform": job.platform,
                "job": job.member,
                "added": report.added,
                "updated": report.updated,
                "replaced": report.replaced,
                "recommendations": report.recommendations,
                "dropped": report.dropped,
                "tokens": tokens,
            },
        )
        if report.changed:
            await self._embed_notes(stored)
        return JobOutcome.MERGED if report.changed else JobOutcome.UNCHANGED

    async def _embed_notes(self, buffer: UserBuffer) -> None:
        """Store the vectors of the user's new notes now, so their next turn can rank them by
        meaning (the reply path would otherwise embed them in the background on that turn).
        A failure loses nothing: the reply path's refresh still catches them."""
        if self.embedder is None:
            return
        key = keys.user_vectors(buffer.platform, buffer.user_id)
        try:
            await store_vectors(
                VectorStore(self.memory.redis),
                self.embedder,
                key,
                note_texts(buffer),
                ttl_seconds=self.settings.ttl_seconds,
            )
        except TimeoutError:
            self.metrics.insights_job(JobOutcome.DEADLINE.value)
            log.warning(
                "embedding a user's notes passed its deadline; their next turn retries",
                extra={"platform": buffer.platform, "deadline": self.settings.background_deadline},
            )
        except CostCapReached:
            self.metrics.insights_job(JobOutcome.OVER_COST_CAP.value)
            log.warning("daily cost cap reached; a user's notes are embedded on a later turn")
        except Exception as exc:
            self.metrics.insights_job("vectors_error")
            log.warning("could not embed a user's notes", extra={"error": str(exc)})

    async def _retry(self, job: ClaimedJob, now: datetime, *, deadline: bool = False) -> JobOutcome:
        """Reschedule ``job`` after an outage (or a model call past its ``deadline``)."""
        attempts = job.attempts + 1
        why = (
            "insights model call passed its deadline" if deadline else "insights model unavailable"
        )
        if attempts >= self.max_attempts:
            log.error(
                f"{why} too many times; job dropped",
                extra={"platform": job.platform, "job": job.member, "attempts": attempts},
                exc_info=True,
            )
            await self.queue.complete(job, now)
            return JobOutcome.DROPPED
        delay = self.backoff(attempts)
        log.warning(
            f"{why}; retrying later",
            extra={"platform": job.platform, "job": job.member, "delay": round(delay, 1)},
            exc_info=not deadline,
        )
        await self.queue.retry_later(job, now, delay)
        return JobOutcome.DEADLINE if deadline else JobOutcome.RETRY

    def backoff(self, attempt: int) -> float:
        """Seconds before retry ``attempt`` (1-based): ``bot.resilience``'s exponential, capped,
        jittered delay, so jobs delayed by one outage do not all return at once."""
        return self.backoff_policy.delay(attempt, self._rng)
