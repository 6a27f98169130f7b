"""The vendor SDK loads on the first model call, once, off the event loop (``bot.llm.lazy``).

The first case runs a fresh interpreter per vendor (``sys.modules`` of the test process is
shared by every test): building the provider imports no SDK, the first call against the
vendor's loopback server imports it and answers. The rest drive ``LazyProvider`` with a real
module and the scripted provider: one load for concurrent callers, a failed load retried, a
close before or during the load, a stream that starts before the load and ends early.
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from types import AsyncGeneratorType, ModuleType

import pytest

from bot.llm.fallback import FallbackProvider
from bot.llm.lazy import LazyProvider
from bot.llm.registry import build_provider
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import LLMRequest, Message, StreamEvent, TextDelta
from bot.settings import ConfigError, ModelSpec, settings_from

ROOT = Path(__file__).resolve().parent.parent

_PROBE = """
import asyncio, json, sys
from bot.llm.registry import build_provider
from bot.llm.types import LLMRequest, Message
from bot.settings import load_settings
from tests.loopback.{module} import {server}

async def main() -> None:
    server = {server}()
    await server.start()
    try:
        server.replies.append("loaded on demand")
        import os
        os.environ["{url_env}"] = server.base_url
        settings = load_settings(warn=False)
        provider = build_provider(settings.llm.model_spec(), settings.llm)
        before = "{sdk}" in sys.modules
        request = LLMRequest(model="m", messages=(Message.user("hi"),))
        answer = await provider.complete(request)
        await provider.aclose()
    finally:
        await server.close()
    print(json.dumps({{"before": before, "after": "{sdk}" in sys.modules, "text": answer.text}}))

asyncio.run(main())
"""

VENDORS = {
    "anthropic": ("anthropic_server", "AnthropicServer", "ANTHROPIC", "anthropic"),
    "openai": ("openai_server", "OpenAIServer", "OPENAI", "openai"),
    "gemini": ("gemini_server", "GeminiServer", "GEMINI", "google.genai"),
}


@pytest.mark.e2e
@pytest.mark.parametrize("vendor", sorted(VENDORS))
def test_the_sdk_is_imported_by_the_first_call_not_by_the_build(
    vendor: str, tmp_path: Path
) -> None:
    module, server, prefix, sdk = VENDORS[vendor]
    url_env = "GOOGLE_GEMINI_BASE_URL" if vendor == "gemini" else f"{prefix}_BASE_URL"
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "LANG"}}
    env.update(
        HOME=str(tmp_path),
        PYTHONPATH=str(ROOT),
        CHORUS_BLOCK_REAL_LLM="1",
        CHORUS_MODEL=f"{vendor}:m",
        **{f"{prefix}_API_KEY": "test-key"},
    )
    probe = _PROBE.format(module=module, server=server, url_env=url_env, sdk=sdk)
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"before": False, "after": True, "text": "loaded on demand"}


class _Blocked(importlib.abc.MetaPathFinder):
    """An import system on which ``name`` is not installed."""

    def __init__(self, name: str) -> None:
        self.name = name

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.name:
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


def test_a_missing_sdk_is_named_at_build_time_with_its_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "anthropic", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_Blocked("anthropic"), *sys.meta_path])
    settings = settings_from({"CHORUS_MODEL": "anthropic:m", "ANTHROPIC_API_KEY": "k"}).llm
    with pytest.raises(ConfigError, match=r"pip install 'chorus-bot\[anthropic\]'"):
        build_provider(ModelSpec("anthropic", "m"), settings)


def test_a_missing_credential_is_still_named_at_build_time() -> None:
    settings = settings_from({"CHORUS_MODEL": "anthropic:m"}).llm
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        build_provider(ModelSpec("anthropic", "m"), settings)


def _request() -> LLMRequest:
    return LLMRequest(model="m", messages=(Message.user("hi"),))


class _Factory:
    """Builds scripted providers, counting the builds; fails the first ``failures`` times."""

    def __init__(self, failures: int = 0) -> None:
        self.built: list[ScriptedProvider] = []
        self.failures = failures

    def __call__(self, module: ModuleType) -> ScriptedProvider:
        assert module.__name__ == "colorsys"  # the module named to the wrapper, imported
        if self.failures:
            self.failures -= 1
            raise RuntimeError("the client could not be built")
        provider = ScriptedProvider(responder=lambda request: f"answer {len(self.built)}")
        self.built.append(provider)
        return provider


def _lazy(factory: _Factory, module: str = "colorsys") -> LazyProvider:
    return LazyProvider("scripted", module, factory, "run: pip install 'chorus-bot[x]'")


async def test_concurrent_first_calls_share_one_load() -> None:
    factory = _Factory()
    provider = _lazy(factory)
    assert provider.loaded is None
    answers = await asyncio.gather(*(provider.complete(_request()) for _ in range(5)))
    assert [a.text for a in answers] == ["answer 1"] * 5
    assert len(factory.built) == 1 and provider.loaded is factory.built[0]
    assert len(factory.built[0].requests) == 5
    await provider.aclose()
    assert factory.built[0].closed


async def test_a_failed_load_is_tried_again_by_the_next_call() -> None:
    factory = _Factory(failures=1)
    provider = _lazy(factory)
    with pytest.raises(RuntimeError, match="could not be built"):
        await provider.complete(_request())
    assert provider.loaded is None
    assert (await provider.complete(_request())).text == "answer 1"
    await provider.aclose()


async def test_a_module_that_cannot_be_imported_gives_the_install_command() -> None:
    provider = _lazy(_Factory(), module="chorus_no_such_sdk_module")
    with pytest.raises(ConfigError, match=r"scripted SDK could not be imported.*chorus-bot\[x\]"):
        await provider.complete(_request())


async def test_warm_loads_in_the_background_and_a_closed_provider_builds_nothing() -> None:
    factory = _Factory()
    warmed = _lazy(factory)
    warmed.warm()
    assert (await warmed.provider()) is factory.built[0]  # the warm load, not a second one
    assert len(factory.built) == 1
    await warmed.aclose()

    closing = _lazy(factory)
    closing.warm()
    await closing.aclose()  # while the import may still run
    assert len(factory.built) == 1 and closing.loaded is None
    with pytest.raises(RuntimeError, match="closed"):
        await closing.complete(_request())


async def test_warming_a_fallback_chain_loads_its_first_model_only() -> None:
    first, second = _Factory(), _Factory()
    chain = FallbackProvider([(_lazy(first), "one"), (_lazy(second), "two")])
    chain.warm()
    for _ in range(3000):  # the load runs in a worker thread; the loop stays free meanwhile
        if first.built:
            break
        await asyncio.sleep(0.01)
    assert len(first.built) == 1 and second.built == []
    assert (await chain.complete(_request())).text == "answer 1"
    assert second.built == []  # the fallback's SDK is loaded only when it is needed
    await chain.aclose()


async def test_a_cancelled_first_caller_does_not_stop_the_load() -> None:
    factory = _Factory()
    provider = _lazy(factory)
    first = asyncio.create_task(provider.complete(_request()))
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert (await provider.complete(_request())).text == "answer 1"
    assert len(factory.built) == 1
    await provider.aclose()


class _Streaming(ScriptedProvider):
    def __init__(self) -> None:
        super().__init__()
        self.finished = False

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        try:
            for word in ("one ", "two ", "three"):
                yield TextDelta(text=word)
        finally:
            self.finished = True


async def test_a_stream_begun_before_the_load_is_the_real_one_and_closes_it_early() -> None:
    inner = _Streaming()
    provider = LazyProvider("scripted", "colorsys", lambda module: inner, "hint")
    events = provider.stream(_request())
    async for event in events:
        assert event == TextDelta(text="one ")
        break
    await events.aclose()  # type: ignore[attr-defined]
    assert inner.finished  # the real stream was closed, not left to the garbage collector
    assert provider.loaded is inner
    after = provider.stream(_request())  # loaded: the real provider's own stream, no wrapper
    assert isinstance(after, AsyncGeneratorType) and after.ag_code is _Streaming.stream.__code__
    await after.aclose()
    await provider.aclose()


STARTED = threading.Event()  # set by the slow SDK's import as it begins
GATE = threading.Event()  # set by the event loop while that import waits for it


async def test_the_import_runs_off_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A module whose import, once begun, waits until the event loop sets ``GATE``: had the
    import run on the loop's thread, the loop could not set it and the wait would time out."""
    (tmp_path / "chorus_slow_sdk.py").write_text(
        "from tests.test_lazy_provider import GATE, STARTED\n"
        "STARTED.set()\n"
        "released = GATE.wait(10)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "chorus_slow_sdk", raising=False)
    STARTED.clear()
    GATE.clear()
    seen: list[bool] = []

    def factory(module: ModuleType) -> ScriptedProvider:
        seen.append(module.released)
        return ScriptedProvider(responder=lambda request: "loaded")

    provider = LazyProvider("slow", "chorus_slow_sdk", factory, "hint")
    answer = asyncio.create_task(provider.complete(_request()))
    assert await asyncio.to_thread(STARTED.wait, 30)  # the import has begun, and the loop turns
    GATE.set()
    assert (await answer).text == "loaded"
    assert seen == [True]
    await provider.aclose()
