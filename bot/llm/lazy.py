"""A provider whose vendor SDK is imported when the model is first needed, off the event loop.

Why: the vendor SDK is most of what a Chorus process costs to start and to keep. Measured on one
quiet machine (``python -c 'import X'``, CPU seconds and peak resident memory): ``anthropic``
1.06 s and 86 MiB, ``openai`` 0.48 s and 59 MiB, ``google.genai`` 0.45 s and 60 MiB, against
0.01 s and 11 MiB for an empty interpreter. A gateway (``--role gateway``) never calls the
model, an admin or insights-only process may never, and an idle bot does not need it until
somebody speaks. So ``bot.llm.registry.build_provider`` checks at start everything that can be
checked without the SDK (the vendor's name, its credentials, that its extra is installed) and
returns this wrapper; the real provider is built on first use, once.

The import runs in a worker thread (``asyncio.to_thread``): an import of a second on the event
loop would stall every other chat, a Discord heartbeat and the health server with it. Both
halves are Python under one GIL, so it is no faster, but the loop keeps turning while it runs.
The client itself is built back on the loop's thread, where SDK clients expect to be made.
Concurrent first calls share one load; a load that fails is tried again by the next call.
``warm()`` starts the load early: ``chorus chat`` does, so the SDK loads while the user types.
A process that froze its start-up heap (``bot.ops.aio.freeze_heap``) has the SDK's objects
frozen too once it is loaded, for the same reason.
Once loaded, ``complete`` and ``stream`` hand over to the real provider directly (no extra
layer per streamed event).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from types import ModuleType

from bot.llm.base import Provider
from bot.llm.types import LLMRequest, LLMResponse, StreamEvent
from bot.settings import ConfigError


def warm(provider: Provider) -> None:
    """Start loading ``provider``'s SDK now, where it loads lazily (a ``LazyProvider``, or a
    fallback chain whose first model is one); any other provider has nothing to load."""
    start = getattr(provider, "warm", None)
    if start is not None:
        start()


class LazyProvider:
    """``Provider`` for ``name``: imports ``module`` on first use and builds the provider with
    ``factory(module)``. ``install_hint`` is the error if the import fails after all."""

    def __init__(
        self, name: str, module: str, factory: Callable[[ModuleType], Provider], install_hint: str
    ) -> None:
        self._name = name
        self._module = module
        self._factory = factory
        self._hint = install_hint
        self._provider: Provider | None = None
        self._loading: asyncio.Task[Provider] | None = None
        self._closed = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def loaded(self) -> Provider | None:
        """The real provider once built, else None."""
        return self._provider

    def warm(self) -> None:
        """Start loading the SDK now, in the background (a no-op once loading or loaded)."""
        if self._provider is None and self._loading is None and not self._closed:
            self._loading = asyncio.get_running_loop().create_task(
                self._load(), name=f"load the {self._name} SDK"
            )
            self._loading.add_done_callback(self._forget_failure)

    async def provider(self) -> Provider:
        """The real provider, loading it first if need be."""
        if self._provider is not None:
            return self._provider
        if self._closed:
            raise RuntimeError(f"the {self._name} provider is closed")
        self.warm()
        assert self._loading is not None
        return await asyncio.shield(self._loading)  # one caller's cancel does not stop the load

    async def _load(self) -> Provider:
        try:
            module = await asyncio.to_thread(importlib.import_module, self._module)
        except ImportError as exc:
            raise ConfigError(
                f"the {self._name} SDK could not be imported ({exc}); {self._hint}"
            ) from exc
        provider = self._factory(module)
        if self._closed:  # closed while the SDK loaded: nobody owns this client any more
            await provider.aclose()
            raise RuntimeError(f"the {self._name} provider is closed")
        self._provider = provider
        if gc.get_freeze_count():  # the process froze its start-up heap: the SDK joins it
            gc.freeze()
        return provider

    def _forget_failure(self, task: asyncio.Task[Provider]) -> None:
        if task.cancelled() or task.exception() is not None:
            self._loading = None  # the next call tries again

    async def complete(self, request: LLMRequest) -> LLMResponse:
        return await (await self.provider()).complete(request)

    def stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        if self._provider is not None:
            return self._provider.stream(request)
        return self._stream_after_load(request)

    async def _stream_after_load(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        provider = await self.provider()
        async with aclosing(provider.stream(request)) as events:  # type: ignore[type-var]
            async for event in events:
                yield event

    async def ready(self) -> bool:
        """Ready unless the loaded provider says otherwise (an unloaded one has nothing to say)."""
        ready = getattr(self._provider, "ready", None)
        return bool(await ready()) if ready is not None else True

    async def aclose(self) -> None:
        self._closed = True
        loading, self._loading = self._loading, None
        if loading is not None and not loading.done():
            loading.cancel()  # the import thread finishes on its own; nothing is built after it
            await asyncio.gather(loading, return_exceptions=True)
        provider, self._provider = self._provider, None
        if provider is not None:
            await provider.aclose()
