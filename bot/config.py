"""Settings, read from the environment and a ``.env`` file (pydantic-settings).

Vendor keys keep their standard names (``ANTHROPIC_API_KEY``...) so an existing shell setup just
works; everything of Chorus's own starts with ``CHORUS_``. Problems are reported as
``ConfigError`` with the variable to fix, never as a traceback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import AliasChoices, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

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

REDIS_SCHEMES = ("memory", "redis", "rediss", "unix")

NO_LLM_MESSAGE = (
    "No LLM is configured. Set CHORUS_MODEL=provider:model and that vendor's key, for example\n"
    "  CHORUS_MODEL=anthropic:claude-sonnet-4-5  ANTHROPIC_API_KEY=...\n"
    "  CHORUS_MODEL=openai:gpt-4.1-mini          OPENAI_API_KEY=...\n"
    "  CHORUS_MODEL=gemini:gemini-2.5-flash      GEMINI_API_KEY=... (or GOOGLE_API_KEY)\n"
    "or, for a local model on an OpenAI-compatible server (Ollama, vLLM, llama.cpp, LM Studio):\n"
    "  CHORUS_MODEL=openai:llama3.2  OPENAI_BASE_URL=http://localhost:11434/v1\n"
    "Put them in the environment or in .env (see .env.example)."
)


class ConfigError(Exception):
    """A setting is missing or wrong. The message names the variable and how to fix it."""


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


class Settings(BaseSettings):
    """Every setting Chorus reads. ``.env.example`` documents each one."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    model: str | None = Field(default=None, validation_alias="CHORUS_MODEL")
    anthropic_api_key: SecretStr | None = Field(default=None, validation_alias="ANTHROPIC_API_KEY")
    anthropic_base_url: str | None = Field(default=None, validation_alias="ANTHROPIC_BASE_URL")
    openai_api_key: SecretStr | None = Field(default=None, validation_alias="OPENAI_API_KEY")
    openai_base_url: str | None = Field(default=None, validation_alias="OPENAI_BASE_URL")
    gemini_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("GEMINI_API_KEY", "GOOGLE_API_KEY")
    )
    gemini_base_url: str | None = Field(default=None, validation_alias="GOOGLE_GEMINI_BASE_URL")

    llm_timeout: float = Field(default=60.0, gt=0, validation_alias="CHORUS_LLM_TIMEOUT")
    llm_max_retries: int = Field(default=4, ge=0, le=10, validation_alias="CHORUS_LLM_MAX_RETRIES")
    max_output_tokens: int = Field(default=1024, ge=1, validation_alias="CHORUS_MAX_OUTPUT_TOKENS")

    max_tool_iterations: int = Field(
        default=24, ge=1, le=100, validation_alias="CHORUS_MAX_TOOL_ITERATIONS"
    )
    turn_budget_seconds: float = Field(default=120.0, gt=0, validation_alias="CHORUS_TURN_BUDGET")
    reasoning: Literal["auto", "off", "low", "medium", "high"] = Field(
        default="auto", validation_alias="CHORUS_REASONING"
    )
    reasoning_max: Literal["low", "medium", "high"] = Field(
        default="medium", validation_alias="CHORUS_REASONING_MAX"
    )

    redis_url: str = Field(default="memory://", validation_alias="CHORUS_REDIS_URL")
    bus: Literal["memory", "redis"] = Field(default="memory", validation_alias="CHORUS_BUS")
    bus_namespace: str = Field(
        default="main", pattern=r"^[a-z0-9_]+$", validation_alias="CHORUS_BUS_NAMESPACE"
    )
    history_max_messages: int = Field(default=40, ge=2, validation_alias="CHORUS_HISTORY_MAX")
    history_ttl_seconds: int = Field(
        default=7 * 24 * 3600, ge=60, validation_alias="CHORUS_HISTORY_TTL"
    )
    max_message_chars: int = Field(default=8000, ge=1, validation_alias="CHORUS_MAX_MESSAGE_CHARS")
    bot_name: str = Field(default="Chorus", min_length=1, validation_alias="CHORUS_BOT_NAME")
    vision: bool = Field(default=True, validation_alias="CHORUS_VISION")

    log_level: str = Field(default="INFO", validation_alias="CHORUS_LOG_LEVEL")
    log_format: Literal["text", "json"] = Field(
        default="text", validation_alias="CHORUS_LOG_FORMAT"
    )

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        check_redis_url(value)
        return value

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
            raise ValueError("use DEBUG, INFO, WARNING, ERROR or CRITICAL")
        return level

    # -- derived ---------------------------------------------------------------------------
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
        """Every secret's value, so the log formatter can mask any that leak into a message."""
        secrets = [self.anthropic_api_key, self.openai_api_key, self.gemini_api_key]
        values = [s.get_secret_value() for s in secrets if s and s.get_secret_value()]
        parts = urlsplit(self.redis_url)
        values += [p for p in (parts.password, *parse_qs(parts.query).get("password", [])) if p]
        return values


def check_redis_url(value: str) -> None:
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL ({exc})") from None
    if parts.scheme not in REDIS_SCHEMES:
        raise ValueError(
            f"scheme {parts.scheme or '(none)'!r} is not supported; use memory:// (embedded), "
            "redis://host:6379/0, rediss://host:6380/0 or unix:///path/to/redis.sock"
        )
    if parts.scheme in ("redis", "rediss") and not parts.hostname:
        raise ValueError("a redis:// URL needs a host, e.g. redis://127.0.0.1:6379/0")
    if parts.scheme == "unix" and not parts.path:
        raise ValueError("a unix:// URL needs a socket path, e.g. unix:///run/redis.sock")
    try:
        _ = parts.port
    except ValueError:
        raise ValueError("the port is not a number between 0 and 65535") from None
    db = parts.path.lstrip("/") if parts.scheme in ("redis", "rediss") else ""
    if db and not db.isdigit():
        raise ValueError(f"the database must be a number, got {db!r} (e.g. redis://host:6379/0)")


def load_settings(**overrides: object) -> Settings:
    """Read settings; turn pydantic's errors into one ConfigError that names each variable."""
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        lines = []
        for error in exc.errors():
            name = _env_name(str(error["loc"][0])) if error["loc"] else "settings"
            message = str(error["msg"]).removeprefix("Value error, ")
            lines.append(f"{name}: {message}")
        raise ConfigError("invalid settings:\n  " + "\n  ".join(lines)) from None


def _env_name(field: str) -> str:
    info = Settings.model_fields.get(field)
    alias = info.validation_alias if info else None
    if isinstance(alias, str):
        return alias
    if isinstance(alias, AliasChoices):
        return " / ".join(str(c) for c in alias.choices)
    return field
