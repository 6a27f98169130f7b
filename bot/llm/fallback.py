"""The model fallback chain: when the primary model keeps failing, ask the next one.

``CHORUS_FALLBACK_MODELS=openai:gpt-4.1-mini,gemini:gemini-2.5-flash`` lists the fallbacks, in
order, after ``CHORUS_MODEL``. ``FallbackProvider`` is itself a ``Provider``, so the agent, the
router and the insights worker do not know it is there.

What moves a request down the chain, and what does not:

- ``ProviderUnavailable`` (429, overload, 5xx, timeouts, *after the provider's own retries*)
  falls back: another vendor is likely up.
- ``ProviderAuthError`` falls back too. A rejected key is an operator's mistake that no retry
  fixes, but another vendor's key may be valid, and a bot that keeps answering while the
  operator fixes the key beats one that apologises to everyone. It is logged at ERROR (naming
  the key variable) on every occurrence, and counts towards that model's breaker.
- ``ProviderRequestError`` (400, 404, 422: the request itself is refused) does NOT fall back:
  the same prompt would most likely be refused again (too long, bad schema), and it must
  surface as the bug it is. Neither does any non-LLM exception, nor a cancellation.

A circuit breaker per target (``vendor:model``): after ``failure_threshold`` consecutive
failures the target is skipped for ``cooldown`` seconds, so a dead primary does not make every
message wait through its retries before the fallback answers. After the cool-down one request
probes it (half-open; concurrent requests keep skipping it): success closes the breaker, failure
opens it for another cool-down. When every target is cooling down, the request fails at once.

The first link sends ``request.model`` unchanged (the agent asks for the chat model, the
insights worker for its cheaper one, and both may share the chain); each fallback rewrites it
to its own model. Streaming falls back only before the first event reached the caller: after
that a retry would repeat text. The answering model is in ``LLMResponse.model``. When nothing
answered, ``ChainExhausted`` (a ``ProviderUnavailable``, so the router apologises and the insights
worker reschedules) names every model tried and why; if every failure was an auth error, the
first ``ProviderAuthError`` is raised instead (rescheduling cannot fix a key).

Mixed vendors in one tool loop: each vendor module already drops the other vendors'
``ThinkingPart``s. One more rule is needed for Anthropic: with extended thinking on, the API
rejects a tool loop whose latest assistant turn does not start with *its own* signed thinking
block, which a turn written by another vendor never has. So when such a turn is sent to
Anthropic, thinking is switched off for that call (the loop then is one "thinking off" turn,
which the API accepts).
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.llm import lazy
from bot.llm.base import Provider
from bot.llm.errors import LLMError, ProviderAuthError, ProviderUnavailable
from bot.llm.registry import build_provider
from bot.llm.types import LLMRequest, LLMResponse, Message, StreamEvent, ThinkingPart, ToolCallPart
from bot.resilience import RetryPolicy
from bot.settings import ConfigError, FallbackSettings, LLMSettings, ModelSpec

log = logging.getLogger("chorus.llm.fallback")

VARIABLE = "CHORUS_FALLBACK_MODELS"
BreakerState = Literal["closed", "open", "half_open"]
OnFallback = Callable[[str, str], None]


class ChainExhausted(ProviderUnavailable):
    """No model of the chain answered; ``tried`` lists ``vendor:model -> reason``."""

    def __init__(self, message: str, *, provider: str, tried: dict[str, str], attempts: int):
        super().__init__(message, provider=provider, status=None, attempts=attempts)
        self.tried = tried


class CircuitBreaker:
    """Closed -> (``threshold`` consecutive failures) -> open -> (``cooldown``) -> one probe."""

    def __init__(self, threshold: int, cooldown: float, clock: Callable[[], float]) -> None:
        self.threshold = threshold
        self.cooldown = cooldown
        self._clock = clock
        self.failures = 0
        self._opened_at: float | None = None
        self._probing = False

    @property
    def state(self) -> BreakerState:
        if self._opened_at is None:
            return "closed"
        if self._probing or self._clock() - self._opened_at >= self.cooldown:
            return "half_open"
        return "open"

    def allow(self) -> bool:
        """May a request go to this target now? In half-open, only the first (the probe)."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._probing:
            self._probing = True
            return True
        return False

    def success(self) -> None:
        self.failures = 0
        self._opened_at = None
        self._probing = False

    def failure(self) -> bool:
        """Count a failure; True when it (re)opened the breaker."""
        self.failures += 1
        probe_failed = self._probing
        self._probing = False
        if probe_failed or (self._opened_at is None and self.failures >= self.threshold):
            self._opened_at = self._clock()
            return True
        return False  # below the threshold, or a late failure of a call made before it opened

    def release(self) -> None:
        """The call ended without a verdict (refused request, cancelled): let another probe."""
        self._probing = False


@dataclass
class _Link:
    provider: Provider
    model: str
    breakers: dict[str, CircuitBreaker] = field(default_factory=dict)


class FallbackProvider:
    """A ``Provider`` over ``chain`` (provider, model), tried in order with a breaker each."""

    def __init__(
        self,
        chain: Sequence[tuple[Provider, str]],
        *,
        failure_threshold: int = 3,
        cooldown: float = 60.0,
        on_fallback: OnFallback | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not chain:
            raise ValueError("a fallback chain needs at least one model")
        self._links = [_Link(provider, model) for provider, model in chain]
        self.name = self._links[0].provider.name
        self.failure_threshold = failure_threshold
        self.cooldown = cooldown
        self.on_fallback = on_fallback
        self._clock = clock

    @property
    def models(self) -> list[str]:
        return [f"{link.provider.name}:{link.model}" for link in self._links]

    def warm(self) -> None:
        """Start loading the first model's SDK now (``bot.llm.lazy``): it answers the first
        message. The fallbacks' SDKs load when one is first needed, so a chain of three vendors
        costs one SDK's memory until something fails."""
        lazy.warm(self._links[0].provider)

    # -- Provider ---------------------------------------------------------------------------------
    async def complete(self, request: LLMRequest) -> LLMResponse:
        attempt = _Attempt(self, request)
        for link, model, breaker in attempt.targets():
            try:
                response = await link.provider.complete(_for(link.provider.name, request, model))
            except (ProviderUnavailable, ProviderAuthError) as exc:
                attempt.failed(link, model, breaker, exc)
                continue
            except BaseException:
                breaker.release()
                raise
            breaker.success()
            return _named(response, model)
        raise attempt.exhausted()

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        attempt = _Attempt(self, request)
        for link, model, breaker in attempt.targets():
            iterator = aiter(link.provider.stream(_for(link.provider.name, request, model)))
            try:
                first = await anext(iterator)
            except StopAsyncIteration:
                breaker.release()
                return
            except (ProviderUnavailable, ProviderAuthError) as exc:
                await _aclose(iterator)
                attempt.failed(link, model, breaker, exc)
                continue
            except BaseException:
                breaker.release()
                await _aclose(iterator)
                raise
            # Committed: text may reach the caller, so this link's errors now propagate.
            try:
                event: StreamEvent = first
                while True:
                    if isinstance(event, LLMResponse):
                        breaker.success()
                        event = _named(event, model)
                    yield event
                    event = await anext(iterator)
            except StopAsyncIteration:
                return
            except (ProviderUnavailable, ProviderAuthError):
                if breaker.failure():
                    self._opened(link, model, breaker)
                raise
            except BaseException:
                breaker.release()
                raise
            finally:
                await _aclose(iterator)
        raise attempt.exhausted()

    async def aclose(self) -> None:
        """Close each distinct provider once (vendors are shared between links)."""
        seen: set[int] = set()
        for link in self._links:
            if id(link.provider) in seen:
                continue
            seen.add(id(link.provider))
            try:
                await link.provider.aclose()
            except Exception:
                log.warning(
                    "error while closing a provider",
                    extra={"provider": link.provider.name},
                    exc_info=True,
                )

    # -- status -----------------------------------------------------------------------------------
    async def ready(self) -> bool:
        """False only while every model of the chain is cooling down after failures."""
        return any(
            not link.breakers or any(b.state != "open" for b in link.breakers.values())
            for link in self._links
        )

    def breaker_states(self) -> dict[str, BreakerState]:
        """``vendor:model`` -> breaker state, for every target used so far."""
        return {
            f"{link.provider.name}:{model}": breaker.state
            for link in self._links
            for model, breaker in link.breakers.items()
        }

    # -- internals --------------------------------------------------------------------------------
    def _breaker(self, link: _Link, model: str) -> CircuitBreaker:
        breaker = link.breakers.get(model)
        if breaker is None:
            breaker = link.breakers[model] = CircuitBreaker(
                self.failure_threshold, self.cooldown, self._clock
            )
        return breaker

    def _opened(self, link: _Link, model: str, breaker: CircuitBreaker) -> None:
        log.warning(
            "model failing; skipping it for the cool-down",
            extra={
                "model": f"{link.provider.name}:{model}",
                "failures": breaker.failures,
                "cooldown_s": self.cooldown,
            },
        )


class _Attempt:
    """One request's walk down the chain: which targets to try, what failed, and why."""

    def __init__(self, chain: FallbackProvider, request: LLMRequest) -> None:
        self.chain = chain
        self.request = request
        self.tried: dict[str, str] = {}
        self.errors: list[LLMError] = []
        self.attempts = 0

    def targets(self) -> Iterator[tuple[_Link, str, CircuitBreaker]]:
        """Lazily, so a later target's breaker is asked (and maybe probed) only when needed.
        The caller ``continue``s after a failure (reported through ``failed``) and leaves the
        loop on success or on an error that does not fall back."""
        previous: str | None = None  # the last target that failed or was skipped
        for index, link in enumerate(self.chain._links):
            model = self.request.model if index == 0 else link.model
            label = f"{link.provider.name}:{model}"
            breaker = self.chain._breaker(link, model)
            if not breaker.allow():
                self.tried[label] = "cooling down after repeated failures"
                previous = label
                continue
            if previous is not None and self.chain.on_fallback is not None:
                self.chain.on_fallback(previous, label)
            yield link, model, breaker
            previous = label

    def failed(self, link: _Link, model: str, breaker: CircuitBreaker, exc: LLMError) -> None:
        label = f"{link.provider.name}:{model}"
        self.errors.append(exc)
        self.attempts += exc.attempts if isinstance(exc, ProviderUnavailable) else 1
        self.tried[label] = f"{type(exc).__name__}: {exc}"
        if breaker.failure():
            self.chain._opened(link, model, breaker)
        log.log(
            logging.ERROR if isinstance(exc, ProviderAuthError) else logging.WARNING,
            "model call failed; the next model of the chain, if any, gets the request",
            extra={"model": label, "error_type": type(exc).__name__},
            exc_info=exc,
        )

    def exhausted(self) -> LLMError:
        if self.errors and all(isinstance(e, ProviderAuthError) for e in self.errors):
            return self.errors[0]
        reasons = "; ".join(f"{label} ({why})" for label, why in self.tried.items())
        return ChainExhausted(
            f"no model of the fallback chain answered: {reasons}",
            provider=self.chain.name,
            tried=dict(self.tried),
            attempts=self.attempts,
        )


def _for(vendor: str, request: LLMRequest, model: str) -> LLMRequest:
    """``request`` for ``vendor``'s ``model`` (see the module docstring on Anthropic thinking)."""
    update: dict[str, Any] = {}
    if request.model != model:
        update["model"] = model
    if vendor == "anthropic" and request.reasoning != "off" and _foreign_tool_turn(request):
        update["reasoning"] = "off"
    return request.model_copy(update=update) if update else request


def _foreign_tool_turn(request: LLMRequest) -> bool:
    """Whether the latest assistant turn called tools without an Anthropic thinking block."""
    last: Message | None = next(
        (m for m in reversed(request.messages) if m.role == "assistant"), None
    )
    if last is None or not any(isinstance(p, ToolCallPart) for p in last.parts):
        return False
    return not any(isinstance(p, ThinkingPart) and p.vendor == "anthropic" for p in last.parts)


def _named(response: LLMResponse, model: str) -> LLMResponse:
    return response if response.model else response.model_copy(update={"model": model})


async def _aclose(iterator: AsyncIterator[StreamEvent]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()


def build_chain(
    settings: LLMSettings,
    primary_spec: ModelSpec,
    fallback: FallbackSettings,
    *,
    retry: RetryPolicy | None = None,
    on_fallback: OnFallback | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Provider:
    """The primary provider alone when no fallback is configured, else a ``FallbackProvider``
    over one provider object per vendor (reused by every model of that vendor). The caller owns
    the result and closes it; closing the chain closes each provider once.

    Every vendor's credentials are checked before any client is built, so a fallback without a
    key fails at startup naming CHORUS_FALLBACK_MODELS and the key variable.
    """
    specs = [primary_spec]
    for spec in fallback.specs():
        if spec not in specs:
            specs.append(spec)
    for spec in specs[1:]:
        try:
            settings.require_credentials(spec.provider)
        except ConfigError as exc:
            raise ConfigError(f"{VARIABLE} lists {spec}, but: {exc}") from None
    if len(specs) == 1:
        return build_provider(primary_spec, settings, retry=retry)
    providers: dict[str, Provider] = {}
    for spec in specs:
        if spec.provider not in providers:
            providers[spec.provider] = build_provider(spec, settings, retry=retry)
    log.info("model fallback chain", extra={"models": ",".join(str(s) for s in specs)})
    return FallbackProvider(
        [(providers[s.provider], s.model) for s in specs],
        failure_threshold=fallback.breaker_failures,
        cooldown=fallback.breaker_cooldown,
        on_fallback=on_fallback,
        clock=clock,
    )
