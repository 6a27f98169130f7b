"""Settings: model spec parsing, credential checks, clear errors, and .env.example coverage."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bot.settings import (
    NO_LLM_MESSAGE,
    ConfigError,
    ModelSpec,
    Settings,
    load_settings,
    parse_model_spec,
    settings_from,
)
from bot.settings.base import Section

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
        load_settings().llm.model_spec()
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
    settings = settings_from({"CHORUS_MODEL": "gemini:gemini-2.5-flash"}).llm
    with pytest.raises(
        ConfigError, match=r"GEMINI_API_KEY \(or GOOGLE_API_KEY\) is not set.*aistudio"
    ):
        settings.model_spec()


def test_google_api_key_is_accepted_for_gemini(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key-123456789")
    settings = load_settings().llm
    assert settings.api_key("gemini") == "g-key-123456789"
    assert settings.model_spec() == ModelSpec("gemini", "gemini-2.5-flash")


def test_local_openai_compatible_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_MODEL", "openai:llama3.2")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:11434/v1")
    assert load_settings().llm.model_spec() == ModelSpec("openai", "llama3.2")


def test_model_is_inferred_only_when_one_vendor_is_configured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "a-key")
    assert load_settings().llm.model_spec().provider == "anthropic"
    monkeypatch.setenv("OPENAI_API_KEY", "o-key")
    with pytest.raises(ConfigError):
        load_settings().llm.model_spec()


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
        settings_from({"CHORUS_REDIS_URL": url})
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
    assert settings_from({"CHORUS_REDIS_URL": url}).state.redis_url == url


def test_bad_numbers_name_their_variable() -> None:
    with pytest.raises(ConfigError, match="CHORUS_LLM_TIMEOUT"):
        settings_from({"CHORUS_LLM_TIMEOUT": "-1"})


def test_dotenv_file_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / ".env").write_text("CHORUS_MODEL=openai:gpt-x\nOPENAI_API_KEY=sk-from-dotenv\n")
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert settings.llm.model_spec() == ModelSpec("openai", "gpt-x")
    assert "sk-from-dotenv" in settings.secret_values()


def test_secret_values_include_the_redis_password() -> None:
    settings = settings_from({"CHORUS_REDIS_URL": "redis://:hunter2-pw@h:6379/0"})
    assert "hunter2-pw" in settings.secret_values()


def test_a_bad_secret_bearing_value_is_not_printed() -> None:
    with pytest.raises(ConfigError) as info:
        settings_from({"CHORUS_REDIS_URL": "redis://:hunter2-pw@h:notaport/0"})
    assert "CHORUS_REDIS_URL=****" in str(info.value)
    assert "hunter2" not in str(info.value)


def test_platform_secrets_are_masked_in_logs_from_the_start() -> None:
    settings = settings_from({"DISCORD_TOKEN": "discord-token-1", "SLACK_BOT_TOKEN": "xoxb-2"})
    assert {"discord-token-1", "xoxb-2"} <= set(settings.secret_values())


@pytest.mark.parametrize("section", sorted(Settings.model_fields))
def test_env_example_documents_every_setting(section: str) -> None:
    example = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
    section_class = Settings.model_fields[section].annotation
    assert isinstance(section_class, type) and issubclass(section_class, Section)
    for name in section_class.variables():
        assert name in documented or name in example, f"{name} is missing from .env.example"
