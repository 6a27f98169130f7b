"""The Provider protocol and the shared machinery of the vendor modules.

A vendor module only translates: neutral request -> SDK call, SDK response -> neutral response,
SDK exception -> ``Failure``. Guarding, retrying and the rule "a stream is retried only before
its first byte reached the caller" live here once.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import ClassVar, Protocol, TypeVar, runtime_checkable

from bot.llm.errors import ProviderAuthError, ProviderRequestError, ProviderUnavailable
from bot.llm.guard import check_endpoint
from bot.llm.types import LLMRequest, LLMResponse, StreamEvent
from bot.resilience import Attempt, Failure, RetryPolicy, Sleep, retry

log = logging.getLogger("chorus.llm.retry")

T = TypeVar("T")


@runtime_checkable
class Provider(Protocol):
    """What the agent talks to. ``name`` is the ``provider`` half of ``provider:model``.

    ``name`` is read-only here so that a class constant (``ClassVar``) satisfies it, as every
    provider declares it.
    """

    @property
    def name(self) -> str: ...

    async def complete(self, request: LLMRequest) -> LLMResponse: ...

    def stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]: ...

    async def aclose(self) -> None: ...


class SDKProvider(ABC):
    """Base of the vendor modules: guard, retries and auth errors, done the same way for all."""

    name: ClassVar[str]
    key_env: ClassVar[str]
    key_url: ClassVar[str]

    def __init__(
        self, *, base_url: str | None, retry: RetryPolicy | None = None, sleep: Sleep | None = None
    ) -> None:
        self.base_url = base_url
        self.retry = retry or RetryPolicy()
        self._sleep: Sleep = sleep or asyncio.sleep

    # -- what each vendor implements -------------------------------------------------------
    @abstractmethod
    async def _complete(self, request: LLMRequest) -> LLMResponse: ...

    @abstractmethod
    def _stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]: ...

    @abstractmethod
    def _classify(self, exc: BaseException) -> Failure:
        """Map an SDK exception to retryable or not. 401/403 go through ``auth_error``."""

    @abstractmethod
    async def aclose(self) -> None: ...

    # -- shared ----------------------------------------------------------------------------
    def auth_error(self, status: int | None) -> ProviderAuthError:
        return ProviderAuthError(self.name, status, self.key_env, self.key_url)

    def _checked_classify(self, exc: BaseException) -> Failure:
        failure = self._classify(exc)
        if failure.status in (401, 403):
            raise self.auth_error(failure.status) from exc
        if not failure.retryable:
            raise ProviderRequestError(
                f"{self.name} refused the request"
                f"{f' (HTTP {failure.status})' if failure.status else ''}: "
                f"{failure.reason or exc}",
                provider=self.name,
                status=failure.status,
            ) from exc
        return failure

    async def _with_retries(self, op: Callable[[], Awaitable[T]]) -> T:
        """``op`` under the retry policy (the SDKs' own retries are off, so this is the only
        one); when retries run out, ``ProviderUnavailable`` carries the attempt count."""
        return await retry(
            op,
            self._checked_classify,
            self.retry,
            what=f"{self.name} call",
            sleep=self._sleep,
            give_up=self._unavailable,
            logger=log,
            message="llm call failed; retrying",
            extra={"provider": self.name},
        )

    def _unavailable(self, state: Attempt) -> ProviderUnavailable:
        failure = state.failure
        return ProviderUnavailable(
            f"{self.name} is unavailable after {state.attempt} attempts "
            f"(last: {failure.reason or type(state.error).__name__}"
            f"{f', HTTP {failure.status}' if failure.status else ''})",
            provider=self.name,
            status=failure.status,
            attempts=state.attempt,
        )

    async def complete(self, request: LLMRequest) -> LLMResponse:
        check_endpoint(self.name, self.base_url)
        return await self._with_retries(lambda: self._complete(request))

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        """Stream text deltas, then the full response. Retried only until the first delta."""
        check_endpoint(self.name, self.base_url)

        async def first_event() -> tuple[StreamEvent, AsyncIterator[StreamEvent]]:
            iterator = aiter(self._stream(request))
            try:
                return await anext(iterator), iterator
            except BaseException:
                await _aclose(iterator)
                raise

        event, iterator = await self._with_retries(first_event)
        try:
            yield event
            async for event in iterator:
                yield event
        except (asyncio.CancelledError, GeneratorExit):
            raise
        except Exception as exc:
            # Text already reached the caller, so a retry would repeat it: fail clearly instead.
            failure = self._checked_classify(exc)
            raise ProviderUnavailable(
                f"{self.name} stream broke after it started ({failure.reason or type(exc).__name__})",
                provider=self.name,
                status=failure.status,
                attempts=1,
            ) from exc
        finally:
            await _aclose(iterator)


async def _aclose(iterator: AsyncIterator[StreamEvent]) -> None:
    close = getattr(iterator, "aclose", None)
    if close is not None:
        await close()
