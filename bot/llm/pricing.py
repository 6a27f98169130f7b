"""Per-model token prices, for the *estimated* cost metric (``chorus_llm_cost_usd_total``).

Why estimates: vendors change prices, bill some features we do not see (long-context tiers,
batch and priority tiers, cache storage, search grounding) and round per request. The table
below holds the standard list prices, in USD per million tokens, as published on the vendors'
pricing pages on ``PRICES_AS_OF``; it is good for a dashboard and for alerts on a runaway bill,
never for accounting. Long-context surcharges (Anthropic over 200k input tokens, Gemini Pro over
200k) are ignored.

``CHORUS_PRICES`` names a JSON file that overrides or extends the table, keyed by model name
(or a prefix of it)::

    {"gpt-4.1-mini": {"input": 0.4, "output": 1.6, "cache_read": 0.1},
     "my-local-model": {"input": 0, "output": 0}}

``cache_read`` and ``cache_write`` default to ``input``. Lookup is by the longest key that is a
prefix of the model name at a word boundary, so dated snapshots (``claude-3-5-haiku-20241022``,
``gpt-4.1-mini-2025-04-14``) find their family; a ``provider:`` or router ``vendor/`` prefix is
ignored. A model with no price counts no cost (a local model is free; an unknown one is logged
once by the metrics module).

How each vendor's ``Usage`` maps (``bot/llm/types.py``): ``input_tokens`` is the uncached input,
``cache_read_tokens`` the cached part; only Anthropic reports ``cache_write_tokens`` (billed at
1.25x input for the 5-minute cache). OpenAI and Gemini charge nothing extra to write their
implicit caches, so their ``cache_write`` is the input price.

``estimate`` is what the daily cost cap reserves before a call (``bot.state.cost``): the
request's input tokens at the uncached input price plus its whole output budget
(``max_tokens``) at the output price, a worst case for one call; no tokenizer is loaded, so the
input is counted as ``CHARS_PER_TOKEN`` characters a token (text in English averages about
four; fewer counts more, never less) and ``IMAGE_TOKENS`` an image. Embedding models have an
input price only; the vendors report no usage for them, so their estimate is also their charge.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bot.llm.types import (
    ImagePart,
    LLMRequest,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    Usage,
)
from bot.settings import ConfigError

VARIABLE = "CHORUS_PRICES"
PRICES_AS_OF = "2025-10-01"
_MILLION = 1_000_000
CHARS_PER_TOKEN = 3
IMAGE_TOKENS = 1600  # a large image on every vendor, roughly
MESSAGE_TOKENS = 8  # per message: role and framing


class Price(BaseModel):
    """USD per million tokens of each kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0)
    output: float = Field(ge=0)
    cache_read: float = Field(ge=0)
    cache_write: float = Field(ge=0)

    @model_validator(mode="before")
    @classmethod
    def _default_cache_prices(cls, data: Any) -> Any:
        """Cache reads and writes cost the input price unless the vendor says otherwise."""
        if isinstance(data, dict) and "input" in data:
            data = dict(data)
            for key in ("cache_read", "cache_write"):
                if data.get(key) is None:
                    data[key] = data["input"]
        return data

    def cost(self, usage: Usage) -> float:
        """The estimated cost of ``usage`` in USD."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / _MILLION


def _p(input: float, output: float, cache_read: float, cache_write: float | None = None) -> Price:
    values = {
        "input": input,
        "output": output,
        "cache_read": cache_read,
        "cache_write": cache_write,
    }
    return Price.model_validate(values)


# List prices on PRICES_AS_OF (USD / million tokens): input, output, cache read[, cache write].
DEFAULT_PRICES: dict[str, Price] = {
    # Anthropic (https://www.anthropic.com/pricing): cache write = 5-minute cache, 1.25x input.
    "claude-opus-4-5": _p(5.00, 25.00, 0.50, 6.25),
    "claude-opus-4-1": _p(15.00, 75.00, 1.50, 18.75),
    "claude-opus-4": _p(15.00, 75.00, 1.50, 18.75),
    "claude-sonnet-4-5": _p(3.00, 15.00, 0.30, 3.75),
    "claude-sonnet-4": _p(3.00, 15.00, 0.30, 3.75),
    "claude-3-7-sonnet": _p(3.00, 15.00, 0.30, 3.75),
    "claude-haiku-4-5": _p(1.00, 5.00, 0.10, 1.25),
    "claude-3-5-haiku": _p(0.80, 4.00, 0.08, 1.00),
    "claude-3-haiku": _p(0.25, 1.25, 0.03, 0.30),
    # OpenAI (https://openai.com/api/pricing/): cached input discounted, no write surcharge.
    "gpt-5": _p(1.25, 10.00, 0.125),
    "gpt-5-mini": _p(0.25, 2.00, 0.025),
    "gpt-5-nano": _p(0.05, 0.40, 0.005),
    "gpt-4.1": _p(2.00, 8.00, 0.50),
    "gpt-4.1-mini": _p(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _p(0.10, 0.40, 0.025),
    "gpt-4o": _p(2.50, 10.00, 1.25),
    "gpt-4o-mini": _p(0.15, 0.60, 0.075),
    "o3": _p(2.00, 8.00, 0.50),
    "o3-mini": _p(1.10, 4.40, 0.55),
    "o4-mini": _p(1.10, 4.40, 0.275),
    # Gemini (https://ai.google.dev/gemini-api/docs/pricing): text input, prompts <= 200k tokens;
    # cache read = the context-caching price; implicit caching has no write charge.
    "gemini-2.5-pro": _p(1.25, 10.00, 0.31),
    "gemini-2.5-flash": _p(0.30, 2.50, 0.075),
    "gemini-2.5-flash-lite": _p(0.10, 0.40, 0.025),
    "gemini-2.0-flash": _p(0.10, 0.40, 0.025),
    "gemini-2.0-flash-lite": _p(0.075, 0.30, 0.01875),
    # Embedding models (input only).
    "text-embedding-3-small": _p(0.02, 0, 0.02),
    "text-embedding-3-large": _p(0.13, 0, 0.13),
    "text-embedding-ada-002": _p(0.10, 0, 0.10),
    "gemini-embedding-001": _p(0.15, 0, 0.15),
    # Speech models (the stream overlay, bot.voice): ``input`` is USD per million *characters*
    # spoken, estimated from the vendors' per-minute or per-character list prices.
    "gpt-4o-mini-tts": _p(15.00, 0, 15.00),
    "tts-1": _p(15.00, 0, 15.00),
    "tts-1-hd": _p(30.00, 0, 30.00),
    "gemini-2.5-flash-preview-tts": _p(10.00, 0, 10.00),
    "gemini-2.5-pro-preview-tts": _p(20.00, 0, 20.00),
    "eleven_multilingual_v2": _p(120.00, 0, 120.00),
    "eleven_flash_v2_5": _p(60.00, 0, 60.00),
}

_BOUNDARY = frozenset("-_@:.")


class PriceTable:
    """Prices by model-name prefix; ``lookup`` finds the longest matching key."""

    def __init__(self, prices: Mapping[str, Price]) -> None:
        self._prices = {key.strip().lower(): price for key, price in prices.items()}
        self._keys = sorted(self._prices, key=len, reverse=True)

    @classmethod
    def default(cls) -> PriceTable:
        return cls(DEFAULT_PRICES)

    def lookup(self, model: str) -> Price | None:
        name = _bare(model)
        for key in self._keys:  # longest first
            if name == key or (name.startswith(key) and name[len(key)] in _BOUNDARY):
                return self._prices[key]
        return None

    def cost(self, model: str, usage: Usage) -> float | None:
        """The estimated USD cost of ``usage`` on ``model``; None when it has no price."""
        price = self.lookup(model)
        return None if price is None else price.cost(usage)

    def estimate(self, request: LLMRequest) -> float | None:
        """The most ``request`` should cost (see the module docstring); None: no price."""
        price = self.lookup(request.model)
        if price is None:
            return None
        return (request_tokens(request) * price.input + request.max_tokens * price.output) / (
            _MILLION
        )

    def estimate_embedding(self, model: str, texts: Sequence[str]) -> float | None:
        """What embedding ``texts`` on ``model`` costs, counted from their length."""
        price = self.lookup(model)
        if price is None:
            return None
        return sum(_tokens(len(text)) for text in texts) * price.input / _MILLION


def speech_cost(table: PriceTable, model: str, chars: int) -> float:
    """The estimated cost of speaking ``chars`` characters with speech model ``model`` (its
    ``input`` price is per million characters); 0 for a model with no price (espeak-ng)."""
    price = table.lookup(model)
    return 0.0 if price is None else price.input * chars / _MILLION


def load_prices(path: str | Path | None = None) -> PriceTable:
    """The default table with the file at ``path`` (``CHORUS_PRICES``) merged over it."""
    if path is None or not str(path).strip():
        return PriceTable.default()
    path = str(path)
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{VARIABLE}={path!r}: cannot read the file ({exc.strerror})") from None
    except ValueError as exc:
        raise ConfigError(f"{VARIABLE}={path!r} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(
            f"{VARIABLE}={path!r}: expected an object of model -> prices, e.g. "
            '{"gpt-4.1-mini": {"input": 0.4, "output": 1.6}}'
        )
    overrides: dict[str, Price] = {}
    for model, entry in raw.items():
        try:
            overrides[str(model)] = Price.model_validate(entry)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(x) for x in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(
                f"{VARIABLE}={path!r}: bad prices for {model!r} ({problems}); "
                "give USD per million tokens as input, output[, cache_read, cache_write]"
            ) from None
    return PriceTable({**DEFAULT_PRICES, **overrides})


def request_tokens(request: LLMRequest) -> int:
    """The input tokens of ``request``, counted from its length (never fewer than it has)."""
    chars = sum(len(part.text) for part in request.system if isinstance(part, TextPart))
    images = 0
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, TextPart | ThinkingPart):
                chars += len(part.text)
            elif isinstance(part, ToolResultPart):
                chars += len(part.name) + len(part.content)
            elif isinstance(part, ToolCallPart):
                chars += len(part.name) + len(json.dumps(part.arguments))
            elif isinstance(part, ImagePart):
                images += 1
    for tool in request.tools:
        chars += len(tool.name) + len(tool.description) + len(json.dumps(tool.parameters))
    if request.response_schema is not None:
        chars += len(json.dumps(request.response_schema))
    framing = MESSAGE_TOKENS * (len(request.messages) + 1)
    return _tokens(chars) + images * IMAGE_TOKENS + framing


def _tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)


def _bare(model: str) -> str:
    """``openai:anthropic/claude-sonnet-4.5`` -> ``claude-sonnet-4.5`` (lowercase)."""
    name = model.strip().lower()
    if ":" in name and name.split(":", 1)[0] in {"anthropic", "openai", "gemini"}:
        name = name.split(":", 1)[1]
    return name.rsplit("/", 1)[-1]
