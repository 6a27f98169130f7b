"""The chat model, the vendors' keys and endpoints, and the fallback chain.

Vendor keys keep their standard names (``ANTHROPIC_API_KEY``...) so an existing shell setup just
works. The provider modules receive this section only: they need a key, a base URL and the call
limits, never the rest of the configuration.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import AliasChoices, Field, SecretStr

from bot.settings.base import ConfigError, Section

PROVIDERS = ("anthropic", "openai", "gemini")

# Used when CHORUS_MODEL is unset but exactly one vendor is configured.
DEFAULT_MODELS = {
    "anthropic": "claude-sonnet-4-5",
    "openai": "gpt-4.1-mini",
    "gemini": "gemini-2.5-flash",
}

KEY_ENV = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "gemini": "GEMINI_API_KEY",
}

KEY_URL = {
    "anthropic": "https://console.anthropic.com/settings/keys",
    "openai": "https://platform.openai.com/api-keys",
    "gemini": "https://aistudio.google.com/apikey",
}

NO_LLM_MESSAGE = (
    "No LLM is configured. Run `chorus init` (in a clone after `make run`: "
    "`.venv/bin/chorus init`) to set one up: it asks for the vendor and the key, tries the key, "
    "and writes .env.\n"
    "Or set one vendor's key (the model is then that vendor's default), or CHORUS_MODEL="
    "provider:model and that vendor's key, for example\n"
    "  CHORUS_MODEL=anthropic:claude-sonnet-4-5  ANTHROPIC_API_KEY=...\n"
    "  CHORUS_MODEL=openai:gpt-4.1-mini          OPENAI_API_KEY=...\n"
    "  CHORUS_MODEL=gemini:gemini-2.5-flash      GEMINI_API_KEY=... (or GOOGLE_API_KEY)\n"
    "or, for a local model on an OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio):\n"
    "  CHORUS_MODEL=openai:llama3.2  OPENAI_BASE_URL=http://localhost:11434/v1\n"
    "Put them in the environment or in .env (see .env.example)."
)


@dataclass(frozen=True)
class ModelSpec:
    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}:{self.model}"


def parse_model_spec(text: str, variable: str = "CHORUS_MODEL") -> ModelSpec:
    provider, sep, model = text.strip().partition(":")
    provider = provider.strip().lower()
    if not sep or not model.strip() or not provider:
        raise ConfigError(
            f"{variable}={text!r} is not provider:model; "
            f"write e.g. anthropic:claude-sonnet-4-5 (providers: {', '.join(PROVIDERS)})"
        )
    if provider not in PROVIDERS:
        raise ConfigError(
            f"{variable}={text!r}: unknown provider {provider!r}; use one of "
            f"{', '.join(PROVIDERS)} (an OpenAI-compatible server is 'openai:' plus OPENAI_BASE_URL)"
        )
    return ModelSpec(provider, model.strip())


class LLMSettings(Section):
    """The chat model, each vendor's key and base URL, and the per-call limits."""

    model: str | None = Field(default=None, validation_alias="CHORUS_MODEL")
    """The chat model as `provider:model`, provider one of `anthropic`, `openai`, `gemini` (e.g.
    `anthropic:claude-sonnet-4-5`, `openai:gpt-4.1-mini`, `gemini:gemini-2.5-flash`). When unset and
    exactly one vendor is configured, that vendor's default model is used."""
    anthropic_api_key: SecretStr | None = Field(default=None, validation_alias="ANTHROPIC_API_KEY")
    """Anthropic key (console.anthropic.com/settings/keys)."""
    anthropic_base_url: str | None = Field(default=None, validation_alias="ANTHROPIC_BASE_URL")
    """Anthropic endpoint (proxies, gateways); unset: the vendor's."""
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    """OpenAI key (platform.openai.com/api-keys); not needed for a local server."""
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    """Any OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio, OpenRouter); unset: the
    vendor's."""
    gemini_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("GEMINI_API_KEY", "GOOGLE_API_KEY")
    )
    """Gemini key (aistudio.google.com/apikey); either name works."""
    gemini_base_url: str | None = Field(default=None, validation_alias="GOOGLE_GEMINI_BASE_URL")
    """Gemini endpoint; unset: the vendor's."""

    llm_timeout: float = Field(default=60.0, gt=0, validation_alias="CHORUS_LLM_TIMEOUT")
    """Seconds before one model call times out."""
    llm_max_retries: int = Field(default=4, ge=0, le=10, validation_alias="CHORUS_LLM_MAX_RETRIES")
    """Retries of 429, overloaded and 5xx answers, with jittered backoff honouring `Retry-After`."""

    def api_key(self, provider: str) -> str | None:
        secret = {
            "anthropic": self.anthropic_api_key,
            "openai": self.openai_api_key,
            "gemini": self.gemini_api_key,
        }[provider]
        value = secret.get_secret_value().strip() if secret else ""
        return value or None

    def base_url(self, provider: str) -> str | None:
        return {
            "anthropic": self.anthropic_base_url,
            "openai": self.openai_base_url,
            "gemini": self.gemini_base_url,
        }[provider] or None

    def _configured_providers(self) -> list[str]:
        found = [p for p in PROVIDERS if self.api_key(p)]
        if self.openai_base_url and "openai" not in found:
            found.append("openai")  # a local OpenAI-compatible server needs no key
        return found

    def model_spec(self) -> ModelSpec:
        """The chat model, from CHORUS_MODEL or inferred from the one configured vendor."""
        if self.model and self.model.strip():
            spec = parse_model_spec(self.model)
        else:
            configured = self._configured_providers()
            if len(configured) != 1:
                raise ConfigError(NO_LLM_MESSAGE)
            spec = ModelSpec(configured[0], DEFAULT_MODELS[configured[0]])
        self.require_credentials(spec.provider)
        return spec

    def require_credentials(self, provider: str) -> None:
        if self.api_key(provider):
            return
        if provider == "openai" and self.openai_base_url:
            return
        alt = " (or GOOGLE_API_KEY)" if provider == "gemini" else ""
        raise ConfigError(
            f"CHORUS_MODEL uses {provider} but {KEY_ENV[provider]}{alt} is not set; "
            f"get a key at {KEY_URL[provider]} and put it in the environment or .env"
        )

    def secret_values(self) -> list[str]:
        secrets = [self.anthropic_api_key, self.openai_api_key, self.gemini_api_key]
        return [s.get_secret_value() for s in secrets if s and s.get_secret_value()]


FALLBACK_VARIABLE = "CHORUS_FALLBACK_MODELS"


class FallbackSettings(Section):
    """The models tried after ``CHORUS_MODEL``, and the circuit breaker of each."""

    models: str = Field(default="", validation_alias=FALLBACK_VARIABLE)
    """Comma list of `provider:model` used, in order, when the primary keeps failing."""
    breaker_failures: int = Field(default=3, ge=1, validation_alias="CHORUS_BREAKER_FAILURES")
    """Failures in a row after which a model is skipped (its circuit breaker opens)."""
    breaker_cooldown: float = Field(default=60.0, gt=0, validation_alias="CHORUS_BREAKER_COOLDOWN")
    """Seconds a failing model is skipped before it is tried again."""

    def specs(self) -> list[ModelSpec]:
        return [
            parse_model_spec(item, FALLBACK_VARIABLE)
            for item in self.models.split(",")
            if item.strip()
        ]
