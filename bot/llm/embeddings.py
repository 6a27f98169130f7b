"""Embedding models through the vendors' SDKs: OpenAI's ``embeddings.create`` (also any
OpenAI-compatible local server, via OPENAI_BASE_URL) and Gemini's ``embed_content``.

CHORUS_EMBEDDING_MODEL names one as ``provider:model`` (``openai:text-embedding-3-small``,
``gemini:text-embedding-004``); the key and base URL are the vendor's chat settings
(``OPENAI_API_KEY``/``OPENAI_BASE_URL``, ``GEMINI_API_KEY``/``GOOGLE_GEMINI_BASE_URL``), so a
deployment configures a vendor once. Anthropic has no embedding API.

Retries are ``bot.resilience.retry`` with the chat providers' classification of each vendor's
errors (the SDKs' own retries off); each attempt is bounded by CHORUS_EMBEDDING_TIMEOUT. On the
reply path the caller bounds the whole call much tighter (``bot/memory/recall.py``) and simply
cancels it. The classes implement ``bot.memory.vectors.Embedder``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from bot.llm.guard import check_endpoint
from bot.resilience import RetryPolicy, retry
from bot.settings import ConfigError, LLMSettings, parse_model_spec
from bot.settings.memory import MemorySettings

if TYPE_CHECKING:
    import openai
    from google import genai

VARIABLE = "CHORUS_EMBEDDING_MODEL"
BATCH = 96  # texts per request: under both vendors' limits (OpenAI 2048, Gemini 100)


class _Embedder:
    """What both vendors' embedders share: their settings, their name (the size is part of it)
    and cutting a request into ``BATCH``-sized calls of ``_batch``."""

    vendor = ""

    def __init__(
        self,
        client: Any,
        model: str,
        base_url: str,
        retry_policy: RetryPolicy,
        dimensions: int = 0,
    ) -> None:
        self.client = client
        self.model = model
        self.base_url = base_url
        self.retry_policy = retry_policy
        self.dimensions = dimensions
        self.name = f"{self.vendor}:{model}" + (f"@{dimensions}" if dimensions else "")

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for start in range(0, len(texts), BATCH):
            out.extend(await self._batch(list(texts[start : start + BATCH])))
        return out

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError


class OpenAIEmbedder(_Embedder):
    """``embeddings.create`` over the official ``openai`` SDK."""

    vendor = "openai"
    client: openai.AsyncOpenAI

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        from bot.llm.openai import classify_error

        check_endpoint("openai", self.base_url)

        async def call() -> list[list[float]]:
            if self.dimensions:
                response = await self.client.embeddings.create(
                    model=self.model, input=texts, dimensions=self.dimensions
                )
            else:
                response = await self.client.embeddings.create(model=self.model, input=texts)
            ordered = sorted(response.data, key=lambda item: item.index)
            return [list(item.embedding) for item in ordered]

        return await retry(call, classify_error, self.retry_policy, what="embed (openai)")

    async def aclose(self) -> None:
        await self.client.close()


class GeminiEmbedder(_Embedder):
    """``aio.models.embed_content`` over the official ``google-genai`` SDK."""

    vendor = "gemini"
    client: genai.Client

    async def _batch(self, texts: list[str]) -> list[list[float]]:
        from bot.llm.gemini import classify_error

        check_endpoint("gemini", self.base_url)

        async def call() -> list[list[float]]:
            from google.genai import types

            contents: Any = texts
            config = types.EmbedContentConfig(output_dimensionality=self.dimensions or None)
            response = await self.client.aio.models.embed_content(
                model=self.model, contents=contents, config=config
            )
            found = response.embeddings or []
            if len(found) != len(texts):
                raise ValueError(f"gemini returned {len(found)} embeddings for {len(texts)} texts")
            return [list(item.values or []) for item in found]

        return await retry(call, classify_error, self.retry_policy, what="embed (gemini)")

    async def aclose(self) -> None:
        await self.client.aio.aclose()
        self.client.close()


def build_embedder(
    model_name: str,
    llm: LLMSettings,
    *,
    timeout: float,
    dimensions: int = 0,
    max_retries: int = 2,
) -> OpenAIEmbedder | GeminiEmbedder | None:
    """The embedder CHORUS_EMBEDDING_MODEL names (None when it is empty: lexical relevance).
    ``dimensions`` (0: the model's own) is part of its name, so stored vectors of another size
    are never compared with its own."""
    if not model_name.strip():
        return None
    spec = parse_model_spec(model_name, VARIABLE)
    policy = RetryPolicy(max_retries=max_retries, base_delay=0.25, max_delay=4.0)
    if spec.provider == "openai":
        return _openai(spec.model, llm, timeout, policy, dimensions)
    if spec.provider == "gemini":
        return _gemini(spec.model, llm, timeout, policy, dimensions)
    raise ConfigError(
        f"{VARIABLE}={model_name!r}: {spec.provider} has no embedding API; use openai: "
        "(or an OpenAI-compatible server through OPENAI_BASE_URL) or gemini:"
    )


def embedder_for(
    memory: MemorySettings, llm: LLMSettings
) -> OpenAIEmbedder | GeminiEmbedder | None:
    """The deployment's embedder (CHORUS_EMBEDDING_MODEL, its timeout and size), or None; for
    any process that stores vectors (the bot; an insights worker writing summaries)."""
    return build_embedder(
        memory.embedding_model,
        llm,
        timeout=memory.embedding_timeout,
        dimensions=memory.embedding_dimensions,
    )


def _openai(
    model: str, llm: LLMSettings, timeout: float, policy: RetryPolicy, dimensions: int
) -> OpenAIEmbedder:
    try:
        from bot.llm.openai import DEFAULT_BASE_URL, sdk_client
    except ModuleNotFoundError:
        raise ConfigError(
            f"{VARIABLE} uses OpenAI but the openai SDK is not installed; "
            "run: pip install 'chorus-bot[openai]'"
        ) from None

    key = llm.api_key("openai")
    base_url = llm.base_url("openai") or DEFAULT_BASE_URL
    if key is None and base_url == DEFAULT_BASE_URL:
        raise ConfigError(f"{VARIABLE}=openai:{model} needs OPENAI_API_KEY (or OPENAI_BASE_URL)")
    client = sdk_client(key or "not-needed", base_url, timeout)
    return OpenAIEmbedder(client, model, base_url, policy, dimensions)


def _gemini(
    model: str, llm: LLMSettings, timeout: float, policy: RetryPolicy, dimensions: int
) -> GeminiEmbedder:
    try:
        from bot.llm.gemini import DEFAULT_BASE_URL, sdk_client
    except ModuleNotFoundError:
        raise ConfigError(
            f"{VARIABLE} uses Gemini but the google-genai SDK is not installed; "
            "run: pip install 'chorus-bot[gemini]'"
        ) from None

    key = llm.api_key("gemini")
    if key is None:
        raise ConfigError(f"{VARIABLE}=gemini:{model} needs GEMINI_API_KEY (or GOOGLE_API_KEY)")
    base_url = llm.base_url("gemini") or DEFAULT_BASE_URL
    client = sdk_client(key, base_url, timeout)
    return GeminiEmbedder(client, model, base_url, policy, dimensions)
