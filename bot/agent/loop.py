"""The agent: a bounded, total, Claude-style tool loop over any Provider.

The semantics follow Anthropic's own tool runner: call the model; if it asked for tools, run
every call of that response concurrently, send the results back, and call again; stop on a
final answer, a refusal, the iteration cap (``CHORUS_MAX_TOOL_ITERATIONS``) or the turn's
wall-clock budget (``CHORUS_TURN_BUDGET``). Nothing a tool does can crash the loop (the Toolbox
turns unknown, raising and timed-out tools into ``is_error`` results), every exit is logged with
its reason, and usage is summed over the turn.

Streaming: given a ``ReplySink`` (the router's draft publisher), each model call is streamed
and its text deltas go to the sink as they arrive; when the model calls tools, the sink hears
that the text so far is not the answer (``reset``) and, if the tools take longer than
``progress_delay``, which tools run (``working``). A stream that breaks after its first text is
asked again whole (``complete``) with the draft reset, so streaming never costs an answer the
unstreamed path would have given. Without a sink the loop calls ``complete`` as before.

Caching within a loop: each iteration moves one cache point to the end of the newest tool
results, so iteration N+1 reads everything iteration N sent from the cache. The other points
(tools, system text, end of history) come from the request and stay where they are; together
that is at most four, Anthropic's limit. The new message and its volatile context sit after the
history's cache point, so the cross-turn prefix never contains them; within one turn they are
constant and are cached along with the loop.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, ConfigDict

import prompts
from bot.llm.base import Provider
from bot.llm.caching import cache_missed
from bot.llm.errors import ProviderUnavailable
from bot.llm.types import (
    CachePoint,
    LLMRequest,
    LLMResponse,
    Message,
    Part,
    StopReason,
    TextDelta,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.tools.base import ToolContext

log = logging.getLogger("chorus.agent")


class ExitReason(StrEnum):
    ANSWERED = "answered"
    REFUSED = "refused"
    MAX_TOKENS = "max_tokens"
    EMPTY = "empty"
    MAX_ITERATIONS = "max_iterations"
    BUDGET = "budget"


class AgentResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    text: str
    exit_reason: ExitReason
    stop_reason: StopReason | None
    usage: Usage
    iterations: int
    llm_seconds: float
    tool_seconds: float = 0.0
    tool_calls: int = 0
    tool_errors: int = 0


class ToolRunner(Protocol):
    """What the loop needs of a Toolbox."""

    async def execute_all(
        self, calls: Sequence[ToolCallPart], ctx: ToolContext
    ) -> list[ToolResultPart]: ...


class ReplySink(Protocol):
    """Where a streamed turn shows its progress. Never raises (it may stop showing)."""

    async def text(self, delta: str) -> None:
        """More text of the current model call."""

    async def reset(self) -> None:
        """The text so far is not the answer (the model called tools, or asked again)."""

    async def working(self, tools: Sequence[str]) -> None:
        """These tools are running (said once they take longer than ``progress_delay``)."""


@dataclass(frozen=True)
class LoopLimits:
    max_iterations: int = 24
    budget_seconds: float = 120.0
    progress_delay: float = 0.5  # a tool call this long is shown on a streamed turn


# A misconfigured prompt misses the cache on every turn; one warning per model this often says
# so without flooding the log (the misses in between are counted in the next warning).
CACHE_WARNING_EVERY = 600.0


class Agent:
    def __init__(
        self,
        provider: Provider,
        *,
        tools: ToolRunner | None = None,
        limits: LoopLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        metrics: MetricsSink | None = None,
    ) -> None:
        self.provider = provider
        self.metrics: MetricsSink = metrics or NullMetrics()
        self.tools = tools
        self.limits = limits or LoopLimits()
        self._clock = clock
        self._cache_warned: dict[tuple[str, str], tuple[float, int]] = {}  # -> (when, misses)

    async def run(
        self, request: LLMRequest, ctx: ToolContext | None = None, sink: ReplySink | None = None
    ) -> AgentResult:
        """One turn: model calls and tool calls until an exit rule fires. Never raises for a
        tool's sake; provider errors (after the provider's own retries) propagate. With a
        ``sink``, the model's text is streamed to it as it is written."""
        deadline = self._clock() + self.limits.budget_seconds
        messages = list(request.messages)
        usage = Usage()
        llm_seconds = tool_seconds = 0.0
        calls_made = errors = 0
        last_text = ""
        response: LLMResponse | None = None
        iteration = 0
        reason: ExitReason
        while True:
            if iteration >= self.limits.max_iterations:
                reason = ExitReason.MAX_ITERATIONS
                break
            remaining = deadline - self._clock()
            if remaining <= 0:
                reason = ExitReason.BUDGET
                break
            iteration += 1
            call = request.model_copy(update={"messages": tuple(messages)})
            started = time.perf_counter()
            try:
                async with asyncio.timeout(remaining):
                    if sink is None:
                        response = await self.provider.complete(call)
                    else:
                        response = await self._streamed(call, sink)
            except TimeoutError:
                llm_seconds += time.perf_counter() - started
                reason = ExitReason.BUDGET
                break
            elapsed = time.perf_counter() - started
            llm_seconds += elapsed
            usage += response.usage
            answered_by = response.model or request.model
            self.metrics.observe_llm(answered_by, elapsed)
            self.metrics.tokens(answered_by, response.usage)
            self._report_cache(request.model, response.usage, iteration)
            last_text = response.text.strip() or last_text
            if response.stop_reason == "refusal":
                reason = ExitReason.REFUSED
                break
            tool_calls = response.tool_calls
            if not tool_calls or self.tools is None or ctx is None:
                reason = _final_reason(response)
                break
            tools_started = time.perf_counter()
            if sink is not None:
                await sink.reset()
            results = await self._run_tools(tool_calls, ctx, deadline, sink)
            tool_seconds += time.perf_counter() - tools_started
            if results is None:
                reason = ExitReason.BUDGET
                break
            calls_made += len(results)
            errors += sum(r.is_error for r in results)
            for outcome in results:
                self.metrics.tool_call(outcome.name, "error" if outcome.is_error else "ok")
            messages = _without_loop_cache_point(messages, len(request.messages))
            messages.append(response.as_message())
            messages.append(Message(role="user", parts=(*untrusted(results), CachePoint())))

        text = _final_text(reason, response, last_text)
        result = AgentResult(
            text=text,
            exit_reason=reason,
            stop_reason=response.stop_reason if response else None,
            usage=usage,
            iterations=iteration,
            llm_seconds=llm_seconds,
            tool_seconds=tool_seconds,
            tool_calls=calls_made,
            tool_errors=errors,
        )
        self._log_exit(request.model, result)
        return result

    async def _streamed(self, call: LLMRequest, sink: ReplySink) -> LLMResponse:
        """One model call, streamed: its text deltas to ``sink``, its response returned."""
        response: LLMResponse | None = None
        started = False
        try:
            async for event in self.provider.stream(call):
                if isinstance(event, TextDelta):
                    started = True
                    await sink.text(event.text)
                else:
                    response = event
        except ProviderUnavailable:
            if not started:
                raise  # retried (and fallen back) by the provider already
            log.warning("model stream broke after it started; asking again without streaming")
            await sink.reset()
            return await self.provider.complete(call)
        if response is None:
            raise ProviderUnavailable(
                "the model's stream ended without an answer",
                provider=getattr(self.provider, "name", ""),
                status=None,
                attempts=1,
            )
        return response

    async def _run_tools(
        self,
        calls: Sequence[ToolCallPart],
        ctx: ToolContext,
        deadline: float,
        sink: ReplySink | None = None,
    ) -> list[ToolResultPart] | None:
        assert self.tools is not None
        announce = (
            asyncio.create_task(self._announce(sink, [c.name for c in calls]))
            if sink is not None
            else None
        )
        try:
            async with asyncio.timeout(max(0.0, deadline - self._clock())):
                return await self.tools.execute_all(calls, ctx)
        except TimeoutError:
            return None
        finally:
            if announce is not None:  # never after the tools: the answer may follow at once
                announce.cancel()
                await asyncio.gather(announce, return_exceptions=True)

    async def _announce(self, sink: ReplySink, names: Sequence[str]) -> None:
        await asyncio.sleep(self.limits.progress_delay)
        await sink.working(names)

    def _report_cache(self, model: str, usage: Usage, iteration: int) -> None:
        provider = getattr(self.provider, "name", "")
        if not cache_missed(provider, model, usage, iteration=iteration):
            return
        now = self._clock()
        last, misses = self._cache_warned.get((provider, model), (None, 0))
        if last is not None and now - last < CACHE_WARNING_EVERY:
            self._cache_warned[provider, model] = (last, misses + 1)
            return
        self._cache_warned[provider, model] = (now, 0)
        log.warning(
            "prompt cache not used: a cacheable request reported no cache read or write; "
            "check that nothing volatile sits before a cache point",
            extra={
                "provider": provider,
                "model": model,
                "iteration": iteration,
                "input_tokens": usage.total_input_tokens,
                "misses_not_logged": misses,
            },
        )

    def _log_exit(self, model: str, result: AgentResult) -> None:
        usage = result.usage
        log.info(
            "turn finished",
            extra={
                "exit": result.exit_reason.value,
                "stop_reason": result.stop_reason,
                "iterations": result.iterations,
                "tool_calls": result.tool_calls,
                "tool_errors": result.tool_errors,
                "model": model,
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "cache_read_tokens": usage.cache_read_tokens,
                "cache_write_tokens": usage.cache_write_tokens,
                "cache_read_share": round(usage.cache_read_share, 3),
                "llm_ms": round(result.llm_seconds * 1000, 1),
            },
        )


def _final_reason(response: LLMResponse) -> ExitReason:
    if not response.text.strip():
        return ExitReason.EMPTY
    if response.stop_reason == "max_tokens":
        return ExitReason.MAX_TOKENS
    return ExitReason.ANSWERED


def fallback_text(reason: ExitReason) -> str | None:
    """What the user reads when the loop ends without an answer of the model's own
    (``prompts/agent/``); None for the exits that keep the model's text."""
    if reason is ExitReason.REFUSED:
        return prompts.render("agent/refusal")
    if reason is ExitReason.EMPTY:
        return prompts.render("agent/empty")
    if reason is ExitReason.MAX_ITERATIONS:
        return prompts.render("agent/max_iterations")
    if reason is ExitReason.BUDGET:
        return prompts.render("agent/budget")
    return None


def _final_text(reason: ExitReason, response: LLMResponse | None, last_text: str) -> str:
    current = response.text.strip() if response else ""
    if reason is ExitReason.REFUSED and current:
        return current
    return fallback_text(reason) or current or last_text


def untrusted(results: Sequence[ToolResultPart]) -> list[ToolResultPart]:
    """Tool output as the model reads it: third-party data in a ``<tool_output>`` block
    (``prompts/agent/tool_output``) that the text inside cannot close, so a fetched page or an
    MCP server's answer is never taken for instructions (the system text says so)."""
    return [
        result.model_copy(
            update={
                "content": prompts.render(
                    "agent/tool_output",
                    tool=result.name,
                    content=result.content.replace("</tool_output", "&lt;/tool_output"),
                )
            }
        )
        for result in results
    ]


def _without_loop_cache_point(messages: list[Message], fixed: int) -> list[Message]:
    """Drop the cache point an earlier iteration added; the request's own points stay."""
    out = messages[:fixed]
    for message in messages[fixed:]:
        parts: tuple[Part, ...] = tuple(p for p in message.parts if not isinstance(p, CachePoint))
        out.append(Message(role=message.role, parts=parts))
    return out
