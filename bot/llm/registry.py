"""Build a provider from ``provider:model`` and the settings.

Vendor modules are imported lazily so each SDK stays an optional extra; a missing SDK gives
the exact install command instead of an ImportError.
"""

from __future__ import annotations

import importlib
from typing import Any

from bot.llm.base import Provider
from bot.resilience import RetryPolicy
from bot.settings import ConfigError, LLMSettings, ModelSpec

_MODULES = {
    "anthropic": ("bot.llm.anthropic", "AnthropicProvider", "anthropic"),
    "openai": ("bot.llm.openai", "OpenAIProvider", "openai"),
    "gemini": ("bot.llm.gemini", "GeminiProvider", "google.genai"),
}


def build_provider(
    spec: ModelSpec, settings: LLMSettings, *, retry: RetryPolicy | None = None
) -> Provider:
    """A ready provider for ``spec.provider``; the caller owns it and must ``aclose`` it."""
    if spec.provider not in _MODULES:
        raise ConfigError(f"unknown provider {spec.provider!r} in {spec}")
    module_name, class_name, sdk = _MODULES[spec.provider]
    settings.require_credentials(spec.provider)
    try:
        module: Any = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and sdk.startswith(exc.name.split(".")[0]):
            extra = spec.provider
            raise ConfigError(
                f"the {spec.provider} SDK is not installed; run: pip install 'chorus-bot[{extra}]'"
            ) from None
        raise
    provider: Provider = getattr(module, class_name).from_settings(settings, retry=retry)
    return provider
