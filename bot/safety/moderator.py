"""The optional moderation model (``CHORUS_MODERATION_MODEL``): OpenAI's moderation endpoint,
or a cheap chat model classifying a text against the community's rules.

- ``openai:omni-moderation-latest`` (any ``openai:`` model with ``moderation`` in its name):
  ``moderations.create`` through the official ``openai`` SDK, with the deployment's
  ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``. Free at OpenAI; a text is flagged when OpenAI
  flags it, and the first flagged category names the rule (``model:harassment``).
- any other ``provider:model``: that model, through the same providers as the chat model,
  reads the rules (``CHORUS_MODERATION_RULES_FILE``, or ``prompts/safety/rules.md``) and the
  text as data, and answers ``ALLOW`` or ``BLOCK <rule number>`` (``model:rule_2``).

A classifying chat model's verdict carries its usage, which the gate adds to the turn's cost
(the daily cost cap); OpenAI's moderation endpoint is free.

Why no retries: the block lists have already run, so a model that fails or is slow only loses
its second opinion. The gate bounds each call with ``CHORUS_MODERATION_TIMEOUT`` and counts a
failure; the policy says whether that fails open (the lists decided) or closed (treated as
flagged; the default of the streamer preset).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import prompts
from bot.llm.base import Provider
from bot.llm.guard import check_endpoint
from bot.llm.registry import build_provider
from bot.llm.types import LLMRequest, Message, TextPart, Usage
from bot.resilience import RetryPolicy
from bot.settings import ConfigError, LLMSettings, SafetySettings, parse_model_spec

if TYPE_CHECKING:
    import openai

VARIABLE = "CHORUS_MODERATION_MODEL"


@dataclass(frozen=True)
class ModelVerdict:
    """``usage`` on ``model``: what the call cost, for the daily cost cap (None: free)."""

    flagged: bool
    category: str = ""
    usage: Usage | None = None
    model: str = ""


class ModerationModel(Protocol):
    name: str

    async def classify(self, text: str) -> ModelVerdict: ...

    async def aclose(self) -> None: ...


class OpenAIModeration:
    """OpenAI's ``/moderations`` endpoint through the official SDK."""

    def __init__(self, client: openai.AsyncOpenAI, model: str, base_url: str) -> None:
        self.client = client
        self.model = model
        self.base_url = base_url
        self.name = f"openai:{model}"

    @classmethod
    def from_settings(cls, settings: LLMSettings, model: str, timeout: float) -> OpenAIModeration:
        try:
            from bot.llm.openai import DEFAULT_BASE_URL, sdk_client
        except ModuleNotFoundError:
            raise ConfigError(
                f"{VARIABLE} uses OpenAI's moderation endpoint but the openai SDK is not "
                "installed; run: pip install 'chorus-bot[openai]'"
            ) from None
        key = settings.api_key("openai")
        base_url = settings.base_url("openai") or DEFAULT_BASE_URL
        if key is None and base_url == DEFAULT_BASE_URL:
            raise ConfigError(f"{VARIABLE}={model!r} needs OPENAI_API_KEY")
        client = sdk_client(key or "not-needed", base_url, timeout)
        return cls(client, model, base_url)

    async def classify(self, text: str) -> ModelVerdict:
        check_endpoint("openai", self.base_url)
        response = await self.client.moderations.create(model=self.model, input=text)
        result = response.results[0]
        if not result.flagged:
            return ModelVerdict(False)
        categories: dict[str, Any] = result.categories.model_dump(by_alias=True)
        flagged = [name for name, value in categories.items() if value]
        return ModelVerdict(True, flagged[0].replace("/", "_") if flagged else "flagged")

    async def aclose(self) -> None:
        await self.client.close()


_ANSWER = re.compile(r"^\W*(ALLOW|BLOCK)\b\W*(\d+)?", re.IGNORECASE)


def _data(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class ChatClassifier:
    """A chat model that reads the community's rules and answers ALLOW or BLOCK <rule>."""

    def __init__(self, provider: Provider, model: str, rules: str, *, owns: bool = True) -> None:
        self.provider = provider
        self.model = model
        self.rules = rules
        self.name = f"{provider.name}:{model}"
        self._owns = owns

    def request(self, text: str) -> LLMRequest:
        return LLMRequest(
            model=self.model,
            system=(TextPart(text=prompts.render("safety/classifier", rules=self.rules)),),
            messages=(Message.user(prompts.render("safety/classify_text", text=_data(text))),),
            max_tokens=16,
            temperature=0,
        )

    async def classify(self, text: str) -> ModelVerdict:
        response = await self.provider.complete(self.request(text))
        found = _ANSWER.match(response.text.strip())
        if found is None:
            raise ValueError(
                f"the moderation model answered neither ALLOW nor BLOCK: {response.text[:40]!r}"
            )
        usage, model = response.usage, self.model
        if found[1].upper() == "ALLOW":
            return ModelVerdict(False, usage=usage, model=model)
        rule = f"rule_{found[2]}" if found[2] else "rules"
        return ModelVerdict(True, rule, usage=usage, model=model)

    async def aclose(self) -> None:
        if self._owns:
            await self.provider.aclose()


def community_rules(settings: SafetySettings) -> str:
    """The rules the classifier reads: the operator's file, or the shipped default."""
    if settings.rules_file is None:
        return prompts.render("safety/rules")
    path = Path(settings.rules_file)
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"CHORUS_MODERATION_RULES_FILE={path}: cannot read it: {exc}") from None
    if not text:
        raise ConfigError(f"CHORUS_MODERATION_RULES_FILE={path} is empty")
    return text


def build_moderation_model(safety: SafetySettings, llm: LLMSettings) -> ModerationModel | None:
    """The model ``CHORUS_MODERATION_MODEL`` names, or None when it is unset."""
    if not safety.model:
        return None
    spec = parse_model_spec(safety.model, VARIABLE)
    if spec.provider == "openai" and "moderation" in spec.model:
        return OpenAIModeration.from_settings(llm, spec.model, safety.timeout)
    provider = build_provider(spec, llm, retry=RetryPolicy(max_retries=0))
    return ChatClassifier(provider, spec.model, community_rules(safety))
