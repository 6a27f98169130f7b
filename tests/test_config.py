"""Settings: model spec parsing, credential checks, clear errors, and .env.example coverage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import AliasChoices
from pydantic_settings import BaseSettings

from adapters.discord.settings import DiscordSettings
from adapters.slack.settings import SlackSettings
from adapters.twitch.settings import TwitchSettings
from adapters.youtube.settings import YouTubeSettings
from bot.config import (
    NO_LLM_MESSAGE,
    ConfigError,
    ModelSpec,
    Settings,
    load_settings,
    parse_model_spec,
)
from bot.live.turns import EngagementSettings
from bot.llm.fallback import FallbackSettings
from bot.memory.settings import MemorySettings
from bot.ops.health import HealthSettings
from bot.tools.toolbox import ToolSettings

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("anthropic:claude-sonnet-4-5", ModelSpec("anthropic", "claude-sonnet-4-5")),
        ("openai:gpt-4.1-mini", ModelSpec("openai", "gpt-4.1-mini")),
        ("gemini:gemini-2.5-flash", ModelSpec("gemini", "gemini-2.5-flash")),
        (" OpenAI:llama3.2:8b ", ModelSpec("openai", "llama3.2:8b")),  # Ollama tags keep their ':'
    ],
)
def test_model_spec_parses(text: str, expected: ModelSpec) -> None:
    assert parse_model_spec(text) == expected


@pytest.mark.parametrize("text", ["claude", "anthropic:", ":gpt", ""])
def test_model_spec_malformed_names_the_variable(text: str) -> None:
    with pytest.raises(ConfigError, match=r"CHORUS_MODEL=.* is not provider:model"):
        parse_model_spec(text)


def test_unknown_provider_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        parse_model_spec("mistral:large")
    message = str(info.value)
    assert "unknown provider 'mistral'" in message
    assert "anthropic, openai, gemini" in message


def test_no_llm_configured_gives_the_one_clear_message() -> None:
    with pytest.raises(ConfigError) as info:
        load_settings().model_spec()
    assert str(info.value) == NO_LLM_MESSAGE
    for variable in (
        "CHORUS_MODEL",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "GEMINI_API_KEY",
        "OPENAI_BASE_URL",
    ):
        assert variable in str(info.value)


def test_model_without_its_key_names_the_key_and_where_to_get_it() -> None:
    settings = load_settings(CHORUS_MODEL="gemini:gemini-2.5-flash")
    with pytest.raises(
        ConfigError, match=r"GEMINI_API_KEY \(or GOOGLE_API_KEY\) is not set.*aistudio"
    ):
        settings.model_spec()


def test_google_api_key_is_accepted_for_gemini(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key-123456789")
    settings = Settings()
    assert settings.api_key("gemini") == "g-key-123456789"
    assert settings.model_spec() == ModelSpec("gemini", "gemini-2.5-flash")


def test_local_openai_compatible_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_MODEL", "openai:llama3.2")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    assert Settings().model_spec() == ModelSpec("openai", "llama3.2")


def test_model_is_inferred_only_when_one_vendor_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a-key")
    assert Settings().model_spec().provider == "anthropic"
    monkeypatch.setenv("OPENAI_API_KEY", "o-key")
    with pytest.raises(ConfigError):
        Settings().model_spec()


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("http://localhost:6379", "scheme 'http' is not supported"),
        ("redis//localhost", "scheme '(none)' is not supported"),
        ("redis://", "needs a host"),
        ("redis://h:notaport/0", "port is not a number"),
        ("redis://h:6379/abc", "database must be a number"),
        ("unix://", "needs a socket path"),
    ],
)
def test_malformed_redis_url_names_the_variable(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(CHORUS_REDIS_URL=url)
    assert "CHORUS_REDIS_URL" in str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "memory://shared",
        "redis://127.0.0.1:6379/3",
        "rediss://:pw@host:6380/0",
        "unix:///run/redis.sock",
    ],
)
def test_good_redis_urls_are_accepted(url: str) -> None:
    assert load_settings(CHORUS_REDIS_URL=url).redis_url == url


def test_bad_numbers_name_their_variable() -> None:
    with pytest.raises(ConfigError, match="CHORUS_LLM_TIMEOUT"):
        load_settings(CHORUS_LLM_TIMEOUT="-1")


def test_dotenv_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("CHORUS_MODEL=openai:gpt-x\nOPENAI_API_KEY=sk-from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    settings = Settings()
    assert settings.model_spec() == ModelSpec("openai", "gpt-x")
    assert "sk-from-dotenv" in settings.secret_values()


def test_secret_values_include_the_redis_password() -> None:
    settings = load_settings(CHORUS_REDIS_URL="redis://:hunter2-pw@h:6379/0")
    assert "hunter2-pw" in settings.secret_values()


@pytest.mark.parametrize(
    "settings_class",
    [
        Settings,
        ToolSettings,
        MemorySettings,
        DiscordSettings,
        SlackSettings,
        TwitchSettings,
        YouTubeSettings,
        EngagementSettings,
        HealthSettings,
        FallbackSettings,
    ],
)
def test_env_example_documents_every_setting(settings_class: type[BaseSettings]) -> None:
    example = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
    for name, field in settings_class.model_fields.items():
        alias = field.validation_alias
        prefix = settings_class.model_config.get("env_prefix") or ""
        if alias is None:
            names = [f"{prefix}{name}".upper()]
        else:
            choices = alias.choices if isinstance(alias, AliasChoices) else [alias]
            names = [alias] if isinstance(alias, str) else [str(c) for c in choices]
        assert any(str(n) in documented or str(n) in example for n in names), (
            f"setting {name} ({names}) is missing from .env.example"
        )
