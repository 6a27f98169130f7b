"""The embedding models through the real vendor SDKs, against the loopback servers' embedding
endpoints (OpenAI ``/v1/embeddings``, Gemini ``batchEmbedContents``)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator

import pytest
from pydantic import SecretStr

from bot.llm.embeddings import build_embedder
from bot.memory.vectors import Embedder, cosine, dequantise, quantise, unit
from bot.settings import ConfigError, LLMSettings
from tests.loopback.embedding_model import LoopbackEmbedder, embed_text
from tests.loopback.gemini_server import GeminiServer
from tests.loopback.openai_server import OpenAIServer


@pytest.fixture
async def openai_server() -> AsyncIterator[OpenAIServer]:
    async with OpenAIServer() as server:
        yield server


@pytest.fixture
async def gemini_server() -> AsyncIterator[GeminiServer]:
    async with GeminiServer(api_key="g-test") as server:
        yield server


def _openai(server: OpenAIServer) -> LLMSettings:
    return LLMSettings(openai_api_key="sk-test", openai_base_url=server.base_url)  # type: ignore[arg-type]


def _near(a: list[float], b: list[float]) -> float:
    return cosine(unit(a), dequantise(quantise(b)))


async def test_openai_sdk_embeds_through_the_endpoint_in_order(openai_server: OpenAIServer) -> None:
    embedder = build_embedder("openai:text-embedding-3-small", _openai(openai_server), timeout=10)
    assert embedder is not None and embedder.name == "openai:text-embedding-3-small"
    try:
        texts = ["eats no meat", "any vegetarian dinner ideas?", "plays the guitar"]
        vectors = await embedder.embed(texts)
    finally:
        await embedder.aclose()
    assert openai_server.embedded == [texts]
    assert [len(v) for v in vectors] == [len(embed_text("x"))] * 3
    for got, text in zip(vectors, texts, strict=True):
        assert _near(got, embed_text(text)) > 0.99  # the SDK decoded the base64 float32s
    assert _near(vectors[1], vectors[0]) > 0.4 > _near(vectors[1], vectors[2])


async def test_a_smaller_size_is_asked_of_both_vendors(
    openai_server: OpenAIServer, gemini_server: GeminiServer
) -> None:
    llm = LLMSettings(
        openai_api_key=SecretStr("sk-test"),
        openai_base_url=openai_server.base_url,
        gemini_api_key=SecretStr("g-test"),
        gemini_base_url=gemini_server.base_url,
    )
    for name in ("openai:text-embedding-3-small", "gemini:text-embedding-004"):
        embedder = build_embedder(name, llm, timeout=10, dimensions=64)
        assert embedder is not None and embedder.name == f"{name}@64"
        try:
            [vector] = await embedder.embed(["eats no meat"])
        finally:
            await embedder.aclose()
        assert len(vector) == 64
    assert openai_server.requests[-1].body["dimensions"] == 64


async def test_openai_embedder_retries_a_server_error(openai_server: OpenAIServer) -> None:
    openai_server.fail(500, "try again")
    embedder = build_embedder("openai:text-embedding-3-small", _openai(openai_server), timeout=10)
    assert embedder is not None
    try:
        [vector] = await embedder.embed(["hello world"])
    finally:
        await embedder.aclose()
    assert len(openai_server.embedded) == 2 and any(vector)


async def test_an_openai_compatible_local_server_needs_no_key(openai_server: OpenAIServer) -> None:
    llm = LLMSettings(openai_base_url=openai_server.base_url)
    embedder = build_embedder("openai:nomic-embed-text", llm, timeout=10)
    assert embedder is not None
    try:
        assert len(await embedder.embed(["hello"])) == 1
    finally:
        await embedder.aclose()
    assert openai_server.requests[-1].body["model"] == "nomic-embed-text"


async def test_gemini_sdk_embeds_a_batch(gemini_server: GeminiServer) -> None:
    llm = LLMSettings(gemini_api_key="g-test", gemini_base_url=gemini_server.base_url)  # type: ignore[arg-type]
    embedder = build_embedder("gemini:text-embedding-004", llm, timeout=10)
    assert embedder is not None and embedder.name == "gemini:text-embedding-004"
    try:
        texts = ["eats no meat", "vegetarian dinner"]
        vectors = await embedder.embed(texts)
    finally:
        await embedder.aclose()
    assert gemini_server.embedded == [texts]
    assert gemini_server.requests[-1].path.endswith("text-embedding-004:batchEmbedContents")
    assert _near(vectors[0], embed_text("eats no meat")) > 0.99


async def test_gemini_bad_key_is_not_retried(gemini_server: GeminiServer) -> None:
    llm = LLMSettings(gemini_api_key="wrong", gemini_base_url=gemini_server.base_url)  # type: ignore[arg-type]
    embedder = build_embedder("gemini:text-embedding-004", llm, timeout=10)
    assert embedder is not None
    try:
        with pytest.raises(Exception, match="API_KEY_INVALID|API key"):
            await embedder.embed(["x"])
    finally:
        await embedder.aclose()
    assert len(gemini_server.requests) == 1


def test_settings_errors_are_specific() -> None:
    assert build_embedder("", LLMSettings(), timeout=1) is None
    with pytest.raises(ConfigError, match="anthropic has no embedding API"):
        build_embedder("anthropic:claude", LLMSettings(), timeout=1)
    with pytest.raises(ConfigError, match="needs OPENAI_API_KEY"):
        build_embedder("openai:text-embedding-3-small", LLMSettings(), timeout=1)
    with pytest.raises(ConfigError, match="needs GEMINI_API_KEY"):
        build_embedder("gemini:text-embedding-004", LLMSettings(), timeout=1)
    with pytest.raises(ConfigError, match="not provider:model"):
        build_embedder("text-embedding-3-small", LLMSettings(), timeout=1)


@pytest.fixture(params=["twin", "openai", "gemini"])
async def embedder(
    request: pytest.FixtureRequest, openai_server: OpenAIServer, gemini_server: GeminiServer
) -> AsyncIterator[Embedder]:
    """Every ``Embedder``: the in-process twin and the two vendor SDKs over loopback servers."""
    llm = LLMSettings(
        openai_api_key=SecretStr("sk-test"),
        openai_base_url=openai_server.base_url,
        gemini_api_key=SecretStr("g-test"),
        gemini_base_url=gemini_server.base_url,
    )
    built: Embedder | None = {
        "twin": LoopbackEmbedder(),
        "openai": build_embedder("openai:text-embedding-3-small", llm, timeout=10),
        "gemini": build_embedder("gemini:text-embedding-004", llm, timeout=10),
    }[request.param]
    assert built is not None
    try:
        yield built
    finally:
        await built.aclose()


async def test_contract_order_size_and_meaning(embedder: Embedder) -> None:
    texts = ["plays the guitar", "eats no meat", "any vegetarian dinner ideas?"] * 40  # > a batch
    vectors = await embedder.embed(texts)
    assert len(vectors) == len(texts) and len({len(v) for v in vectors}) == 1
    assert [_near(a, b) > 0.99 for a, b in zip(vectors, vectors[3:], strict=False)] == [True] * 117
    guitar, meat, veg = vectors[:3]
    assert _near(veg, meat) > 0.4 > _near(veg, guitar)
    assert await embedder.embed([]) == []


def test_without_the_openai_sdk_an_openai_embedder_names_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "bot.llm.openai", raising=False)
    settings = LLMSettings(openai_api_key=SecretStr("k"))
    with pytest.raises(ConfigError, match=r"openai SDK is not installed.*chorus-bot\[openai\]"):
        build_embedder("openai:text-embedding-3-small", settings, timeout=10)
