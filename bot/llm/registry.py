"""Build a provider from ``provider:model`` and the settings.

Vendor modules are imported lazily so each SDK stays an optional extra; a missing SDK gives
the exact install command instead of an ImportError. Everything that can be checked without
importing the SDK (the vendor's name, its credentials, that its extra is installed) is checked
here, at start; the SDK itself is imported when the model is first needed
(``bot.llm.lazy``, which says why).
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

from bot.llm.base import Provider
from bot.llm.lazy import LazyProvider
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
    """A provider for ``spec.provider`` (its SDK loads on first use); the caller owns it and
    must ``aclose`` it."""
    if spec.provider not in _MODULES:
        raise ConfigError(f"unknown provider {spec.provider!r} in {spec}")
    module_name, class_name, sdk = _MODULES[spec.provider]
    settings.require_credentials(spec.provider)
    hint = f"run: pip install 'chorus-bot[{spec.provider}]'"
    if not _installed(sdk):
        raise ConfigError(f"the {spec.provider} SDK is not installed; {hint}")

    def build(module: ModuleType) -> Provider:
        provider: Provider = getattr(module, class_name).from_settings(settings, retry=retry)
        return provider

    return LazyProvider(spec.provider, module_name, build, hint)


def _installed(sdk: str) -> bool:
    """Whether ``sdk`` can be imported, found without importing it (``google.genai`` imports
    the ``google`` namespace package, which is empty)."""
    try:
        return importlib.util.find_spec(sdk) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False
