"""Where settings come from: every documented variable works from ``.env``, the environment wins
over ``.env``, unknown ``CHORUS_*`` names are warned about, and a bad value names its variable
and the place it came from.

The documented variables are read from the tables of the docs pages (docs/**/*.md, the generated
settings reference included) and ``.env.example`` here, so a newly documented variable fails ``test_documented_variable_works_from_dotenv`` until it has a sample
below (and works).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from bot.app import Chorus
from bot.events import StreamEventKind
from bot.llm.types import Usage
from bot.ops.metrics import Metrics
from bot.settings import ConfigError, Settings, known_variables, load_settings
from tests.settings_samples_recall import ADMIN_SAMPLES, RECALL_SAMPLES
from tests.settings_samples_safety import SAFETY_SAMPLES
from tests.settings_samples_summaries import SUMMARY_SAMPLES
from tests.settings_samples_twitch import TWITCH_CONDUIT_SAMPLES
from tests.settings_samples_voice import VOICE_SAMPLES

ROOT = Path(__file__).resolve().parent.parent
ECHO_SERVER = ROOT / "tests" / "mcp_servers" / "echo_server.py"


def documented_variables() -> list[str]:
    """Every variable named in the first column of a table in docs/ and in ``.env.example``."""
    names: set[str] = set()
    for page in sorted((ROOT / "docs").rglob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            if line.startswith("|"):  # the first column names the variables
                names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split("|")[1]))
    example = (ROOT / ".env.example").read_text(encoding="utf-8")
    names.update(re.findall(r"^#?\s*([A-Z][A-Z0-9_]+)=", example, re.MULTILINE))
    return sorted(names)


# variable -> (where it lands in the root, the text in .env, the value expected there). Each
# text differs from the default, so a variable that is silently ignored fails.
MINIMAL_TOML = ROOT / "tests" / "fixtures" / "config" / "minimal.toml"
SAMPLES: dict[str, tuple[tuple[str, ...], str, Any]] = {
    "CHORUS_CONFIG": (("file.path", "file.found"), str(MINIMAL_TOML), MINIMAL_TOML),
    "CHORUS_RUN_DIR": (("file.run_dir",), "run/pids", Path("run/pids")),
    "CHORUS_MODEL": (("llm.model",), "openai:gpt-x", "openai:gpt-x"),
    "ANTHROPIC_API_KEY": (("llm.anthropic_api_key",), "sk-ant-env-file", "sk-ant-env-file"),
    "OPENAI_API_KEY": (("llm.openai_api_key",), "sk-env-file", "sk-env-file"),
    "GEMINI_API_KEY": (("llm.gemini_api_key",), "gem-env-file", "gem-env-file"),
    "GOOGLE_API_KEY": (("llm.gemini_api_key",), "goog-env-file", "goog-env-file"),
    "ANTHROPIC_BASE_URL": (
        ("llm.anthropic_base_url",),
        "http://127.0.0.1:9/a",
        "http://127.0.0.1:9/a",
    ),
    "OPENAI_BASE_URL": (("llm.openai_base_url",), "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1"),
    "GOOGLE_GEMINI_BASE_URL": (
        ("llm.gemini_base_url",),
        "http://127.0.0.1:9/g",
        "http://127.0.0.1:9/g",
    ),
    "CHORUS_LLM_TIMEOUT": (("llm.llm_timeout",), "12.5", 12.5),
    "CHORUS_LLM_MAX_RETRIES": (("llm.llm_max_retries",), "2", 2),
    "CHORUS_MAX_OUTPUT_TOKENS": (("agent.max_output_tokens",), "2048", 2048),
    "CHORUS_FALLBACK_MODELS": (("fallback.models",), "openai:gpt-4.1-mini", "openai:gpt-4.1-mini"),
    "CHORUS_BREAKER_FAILURES": (("fallback.breaker_failures",), "5", 5),
    "CHORUS_BREAKER_COOLDOWN": (("fallback.breaker_cooldown",), "30", 30.0),
    "CHORUS_HEALTH_PORT": (("health.port",), "9999", 9999),
    "CHORUS_HEALTH_HOST": (("health.host",), "127.0.0.1", "127.0.0.1"),
    "CHORUS_PRICES": (("metrics.prices",), "prices.json", Path("prices.json")),
    "CHORUS_MAX_TOOL_ITERATIONS": (("agent.max_tool_iterations",), "7", 7),
    "CHORUS_TURN_BUDGET": (("agent.turn_budget_seconds",), "30", 30.0),
    "CHORUS_MAX_TURNS_IN_FLIGHT": (("agent.max_turns_in_flight",), "64", 64),
    "CHORUS_SHUTDOWN_GRACE": (("agent.shutdown_grace",), "7.5", 7.5),
    "CHORUS_STREAM_REPLIES": (("agent.stream_replies",), "slack, discord", {"slack", "discord"}),
    "CHORUS_REASONING": (("agent.reasoning",), "high", "high"),
    "CHORUS_REASONING_MAX": (("agent.reasoning_max",), "high", "high"),
    "CHORUS_TOOLS_ENABLED": (
        ("tools.tools_enabled",),
        "current_time, fetch_page",
        frozenset({"current_time", "fetch_page"}),
    ),
    "CHORUS_TOOLS_DISABLED": (("tools.tools_disabled",), "fetch_page", frozenset({"fetch_page"})),
    "CHORUS_TOOLS_CHANNELS": (("tools.tools_channels",), "channels.json", Path("channels.json")),
    "CHORUS_TOOL_TIMEOUT": (("tools.tool_timeout",), "4", 4.0),
    "CHORUS_FETCH_ALLOW": (
        ("tools.fetch_allow",),
        "10.0.0.0/8, wiki.internal",
        frozenset({"10.0.0.0/8", "wiki.internal"}),
    ),
    "CHORUS_FETCH_MAX_BYTES": (("tools.fetch_max_bytes",), "4096", 4096),
    "CHORUS_FETCH_TIMEOUT": (("tools.fetch_timeout",), "3", 3.0),
    "CHORUS_FEEDS": (("tools.feeds",), "https://example.org/rss", ("https://example.org/rss",)),
    "CHORUS_MCP_CONFIG": (("tools.mcp_config",), "mcp.json", Path("mcp.json")),
    "CHORUS_PLUGINS": (("plugins.modules",), "a.b, c", ("a.b", "c")),
    "CHORUS_PLUGIN_ENTRY_POINTS": (("plugins.entry_points",), "true", True),
    "CHORUS_PLUGIN_HOOK_TIMEOUT": (("plugins.hook_timeout",), "2", 2.0),
    "CHORUS_DATA_COMPACT_MINUTES": (("state.data_compact_minutes",), "2.5", 2.5),
    "CHORUS_PLUGIN_EVENT_CONCURRENCY": (("plugins.event_concurrency",), "3", 3),
    "CHORUS_REDIS_URL": (
        ("state.redis_url",),
        "redis://127.0.0.1:6379/3",
        "redis://127.0.0.1:6379/3",
    ),
    "CHORUS_BUS": (("state.bus",), "redis", "redis"),
    "CHORUS_BUS_NAMESPACE": (("state.bus_namespace",), "staging", "staging"),
    "CHORUS_BUS_RETENTION": (("state.bus_retention_seconds",), "3600", 3600),
    "CHORUS_HISTORY_MAX": (("state.history_max_messages",), "80", 80),
    "CHORUS_MAX_DELIVERIES": (("state.max_deliveries",), "5", 5),
    "CHORUS_CLAIM_LEASE_MS": (("state.claim_lease_ms",), "20000", 20_000),
    "CHORUS_PARTITION_LEASE_MS": (("state.partition_lease_ms",), "8000", 8_000),
    "CHORUS_OUTBOX_LIMIT": (("state.outbox_limit",), "500", 500),
    "CHORUS_OUTBOX_FLUSH_SECONDS": (("state.outbox_flush_seconds",), "2.5", 2.5),
    "CHORUS_SPOOL_DIR": (("state.spool_dir",), "/var/lib/chorus/spool", "/var/lib/chorus/spool"),
    "CHORUS_HISTORY_TTL": (
        ("state.history_ttl_seconds", "memory.history_ttl_seconds"),
        "3600",
        3600,
    ),
    "CHORUS_MAX_MESSAGE_CHARS": (("agent.max_message_chars",), "500", 500),
    "CHORUS_ENGAGE_MIN_PENDING": (("engagement.min_pending",), "3", 3),
    "CHORUS_ENGAGE_MIN_GAP_SECONDS": (("engagement.min_gap_seconds",), "20", 20.0),
    "CHORUS_ENGAGE_MENTION_BURST": (("engagement.mention_burst",), "5", 5),
    "CHORUS_ENGAGE_MAX_BATCH_CHATTERS": (("engagement.max_batch_chatters",), "3", 3),
    "CHORUS_ENGAGE_MAX_MENTION_BATCH": (("engagement.max_mention_batch",), "4", 4),
    "CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS": (("engagement.channel_cooldown_seconds",), "2", 2.0),
    "CHORUS_ENGAGE_USER_COOLDOWN_SECONDS": (("engagement.user_cooldown_seconds",), "4", 4.0),
    "CHORUS_ENGAGE_WALL_MAX_CHARS": (("engagement.wall_max_chars",), "200", 200),
    "CHORUS_ENGAGE_PAUSE_HOURS": (("engagement.pause_hours",), "2.5", 2.5),
    "CHORUS_ENGAGE_YOUTUBE_MIN_PENDING": (("engagement.youtube_min_pending",), "20", 20),
    "CHORUS_ENGAGE_YOUTUBE_MIN_GAP_SECONDS": (
        ("engagement.youtube_min_gap_seconds",),
        "900",
        900.0,
    ),
    "CHORUS_ENGAGE_YOUTUBE_MAX_BATCH_CHATTERS": (
        ("engagement.youtube_max_batch_chatters",),
        "4",
        4,
    ),
    "CHORUS_ENGAGE_YOUTUBE_CHANNEL_COOLDOWN_SECONDS": (
        ("engagement.youtube_channel_cooldown_seconds",),
        "60",
        60.0,
    ),
    "CHORUS_ENGAGE_YOUTUBE_USER_COOLDOWN_SECONDS": (
        ("engagement.youtube_user_cooldown_seconds",),
        "30",
        30.0,
    ),
    "CHORUS_ENGAGE_YOUTUBE_IDLE_PROMPT_AFTER_SECONDS": (
        ("engagement.youtube_idle_prompt_after_seconds",),
        "1200",
        1200.0,
    ),
    "CHORUS_ENGAGE_IDLE_PROMPT_AFTER_SECONDS": (
        ("engagement.idle_prompt_after_seconds",),
        "600",
        600.0,
    ),
    "CHORUS_THANKS": (
        ("thanks.kinds",),
        "raid, Super_Chat",
        frozenset({StreamEventKind.RAID, StreamEventKind.SUPER_CHAT}),
    ),
    "CHORUS_THANKS_SETTLE_SECONDS": (("thanks.settle_seconds",), "2", 2.0),
    "CHORUS_THANKS_MAX_WAIT_SECONDS": (("thanks.max_wait_seconds",), "45", 45.0),
    "CHORUS_THANKS_MIN_GAP_SECONDS": (("thanks.min_gap_seconds",), "90", 90.0),
    "CHORUS_THANKS_MAX_NAMES": (("thanks.max_names",), "5", 5),
    "CHORUS_PINS_MAX": (("memory.pins_max",), "5", 5),
    "CHORUS_RECS_MAX": (("memory.recs_max",), "3", 3),
    "CHORUS_MEMORY_TTL": (("memory.ttl_seconds",), "3600", 3600),
    "CHORUS_PROMPT_PINS": (("memory.prompt_pins",), "4", 4),
    "CHORUS_PROMPT_RECS": (("memory.prompt_recs",), "2", 2),
    "CHORUS_PIN_THRESHOLD": (("memory.pin_threshold",), "0.3", 0.3),
    "CHORUS_REC_THRESHOLD": (("memory.rec_threshold",), "0.2", 0.2),
    "CHORUS_CONTEXT_CHARS": (("memory.context_chars",), "1200", 1200),
    "CHORUS_INSIGHTS_ENABLED": (("memory.insights_enabled",), "false", False),
    "CHORUS_INSIGHTS_IN_PROCESS": (("memory.insights_in_process",), "false", False),
    "CHORUS_INSIGHTS_MODEL": (("memory.insights_model_name",), "openai:gpt-x", "openai:gpt-x"),
    "CHORUS_INSIGHTS_DEBOUNCE": (("memory.insights_debounce",), "30", 30.0),
    "CHORUS_INSIGHTS_MAX_DELAY": (("memory.insights_max_delay",), "300", 300.0),
    "CHORUS_INSIGHTS_USER_DAILY_TOKENS": (("memory.insights_user_daily_tokens",), "1000", 1000),
    "CHORUS_INSIGHTS_CHANNEL_DAILY_TOKENS": (
        ("memory.insights_channel_daily_tokens",),
        "5000",
        5000,
    ),
    "CHORUS_INSIGHTS_POLL": (("memory.insights_poll_seconds",), "5", 5.0),
    "CHORUS_INSIGHTS_HISTORY": (("memory.insights_history_lines",), "10", 10),
    "CHORUS_BOT_NAME": (("agent.bot_name",), "Wren", "Wren"),
    "CHORUS_VISION": (("agent.vision",), "false", False),
    "CHORUS_LOG_LEVEL": (("logging.level",), "debug", "DEBUG"),
    "CHORUS_LOG_FEED_LEVEL": (("logging.feed_level",), "info", "INFO"),
    "CHORUS_LOG_FORMAT": (("logging.format",), "json", "json"),
    "DISCORD_TOKEN": (("discord.token",), "discord-env-file", "discord-env-file"),
    "DISCORD_MESSAGE_CONTENT_INTENT": (("discord.message_content_intent",), "true", True),
    "DISCORD_MEMBERS_INTENT": (("discord.members_intent",), "true", True),
    "DISCORD_ANSWER_BOTS": (("discord.answer_bots",), "true", True),
    "DISCORD_ALLOWED_CHANNELS": (("discord.allowed_channels",), "1,2", frozenset({1, 2})),
    "DISCORD_ALWAYS_ANSWER_CHANNELS": (("discord.always_answer_channels",), "3", frozenset({3})),
    "DISCORD_AMBIENT_CHANNELS": (("discord.ambient_channels",), "4, 5", frozenset({4, 5})),
    "DISCORD_SYNC_COMMANDS": (("discord.sync_commands",), "false", False),
    "DISCORD_TYPING_TIMEOUT": (("discord.typing_timeout",), "30", 30.0),
    "DISCORD_COMMAND_TIMEOUT": (("discord.command_timeout",), "300", 300.0),
    "DISCORD_SHARD_COUNT": (("discord.shard_count",), "4", 4),
    "DISCORD_SHARD_IDS": (("discord.shard_ids",), "0-1", (0, 1)),
    "DISCORD_IDENTIFY_WINDOW": (("discord.identify_window",), "2.5", 2.5),
    "DISCORD_GATEWAY_INDEX": (("discord.gateway_index",), "gw-0", 0),
    "DISCORD_GATEWAY_COUNT": (("discord.gateway_count",), "1", 1),
    "DISCORD_API_BASE_URL": (
        ("discord.api_base_url",),
        "http://127.0.0.1:9/api/v10",
        "http://127.0.0.1:9/api/v10",
    ),
    "DISCORD_GATEWAY_URL": (("discord.gateway_url",), "ws://127.0.0.1:9", "ws://127.0.0.1:9"),
    "SLACK_BOT_TOKEN": (("slack.bot_token",), "xoxb-env-file", "xoxb-env-file"),
    "SLACK_APP_TOKEN": (("slack.app_token",), "xapp-env-file", "xapp-env-file"),
    "SLACK_SIGNING_SECRET": (("slack.signing_secret",), "signing-env-file", "signing-env-file"),
    "SLACK_HTTP_HOST": (("slack.http_host",), "127.0.0.1", "127.0.0.1"),
    "SLACK_HTTP_PORT": (("slack.http_port",), "3100", 3100),
    "SLACK_API_BASE_URL": (
        ("slack.api_base_url",),
        "https://slack-gov.com/api",
        "https://slack-gov.com/api/",
    ),
    "SLACK_AMBIENT_CHANNELS": (("slack.ambient_channels",), "C1,C2", frozenset({"C1", "C2"})),
    "SLACK_ALWAYS_ANSWER_CHANNELS": (("slack.always_answer_channels",), "C3", frozenset({"C3"})),
    "SLACK_MAX_FILE_BYTES": (("slack.max_file_bytes",), "1024", 1024),
    "SLACK_NATIVE_STREAMING": (("slack.native_streaming",), "false", False),
    "SLACK_CLIENT_ID": (("slack.client_id",), "1111.2222", "1111.2222"),
    "SLACK_CLIENT_SECRET": (("slack.client_secret",), "client-env-file", "client-env-file"),
    "SLACK_TOKEN_ENCRYPTION_KEY": (("slack.token_encryption_key",), "key-env", "key-env"),
    "SLACK_SCOPES": (("slack.scopes",), "chat:write", "chat:write"),
    "SLACK_REDIRECT_URI": (("slack.redirect_uri",), "https://h/r", "https://h/r"),
    "SLACK_AUTHORIZE_URL": (("slack.authorize_url",), "https://h/a", "https://h/a"),
    "SLACK_TOKEN_ROTATION_MINUTES": (("slack.token_rotation_minutes",), "30", 30),
    "SLACK_UNINSTALL_GRACE_SECONDS": (("slack.uninstall_grace_seconds",), "60", 60),
    "TWITCH_CLIENT_ID": (("twitch.client_id",), "client-env-file", "client-env-file"),
    "TWITCH_CLIENT_SECRET": (("twitch.client_secret",), "tsecret-env-file", "tsecret-env-file"),
    "TWITCH_ACCESS_TOKEN": (("twitch.access_token",), "access-env-file", "access-env-file"),
    "TWITCH_REFRESH_TOKEN": (("twitch.refresh_token",), "refresh-env-file", "refresh-env-file"),
    "TWITCH_CHANNELS": (("twitch.channels",), "#One,two", ("one", "two")),
    "TWITCH_BOT_ID": (("twitch.bot_id",), "12345", "12345"),
    "TWITCH_AMBIENT": (("twitch.ambient",), "false", False),
    "TWITCH_STREAM_STATE": (("twitch.stream_state",), "true", True),
    "TWITCH_REDEMPTIONS": (("twitch.redemptions",), "false", False),
    "TWITCH_BOT_IS_MOD": (("twitch.bot_is_mod",), "true", True),
    "TWITCH_TOKEN_STORE": (
        ("twitch.token_store",),
        "file:/srv/tokens.json",
        "file:/srv/tokens.json",
    ),
    "TWITCH_MAX_PIECES": (("twitch.max_pieces",), "3", 3),
    "TWITCH_API_BASE_URL": (
        ("twitch.api_base_url",),
        "http://127.0.0.1:9/helix",
        "http://127.0.0.1:9/helix/",
    ),
    "TWITCH_AUTH_BASE_URL": (
        ("twitch.auth_base_url",),
        "http://127.0.0.1:9",
        "http://127.0.0.1:9/",
    ),
    "TWITCH_EVENTSUB_WS_URL": (
        ("twitch.eventsub_ws_url",),
        "ws://127.0.0.1:9/ws",
        "ws://127.0.0.1:9/ws",
    ),
    "YOUTUBE_CLIENT_ID": (("youtube.client_id",), "yt-client", "yt-client"),
    "YOUTUBE_CLIENT_SECRET": (("youtube.client_secret",), "yt-secret", "yt-secret"),
    "YOUTUBE_REFRESH_TOKEN": (("youtube.refresh_token",), "1//yt-refresh", "1//yt-refresh"),
    "YOUTUBE_VIDEO_ID": (("youtube.video_id",), "dQw4w9WgXcQ", "dQw4w9WgXcQ"),
    "YOUTUBE_BOT_NAME": (("youtube.bot_name",), "wren", "wren"),
    "YOUTUBE_UNADDRESSED": (("youtube.unaddressed",), "ignore", "ignore"),
    "YOUTUBE_API_BASE_URL": (
        ("youtube.api_base_url",),
        "http://127.0.0.1:9/youtube/v3",
        "http://127.0.0.1:9/youtube/v3",
    ),
    "GOOGLE_OAUTH_TOKEN_URL": (("youtube.token_url",), "http://[::1]/t", "http://[::1]/t"),
    "GOOGLE_OAUTH_AUTH_URL": (("youtube.auth_url",), "http://[::1]/a", "http://[::1]/a"),
    "YOUTUBE_READ_MODE": (("youtube.read_mode",), "poll", "poll"),
    "YOUTUBE_GRPC_TARGET": (("youtube.grpc_target",), "127.0.0.1:9", "127.0.0.1:9"),
    "YOUTUBE_GRPC_INSECURE": (("youtube.grpc_insecure",), "true", True),
    "YOUTUBE_COST_STREAM": (("youtube.cost_stream",), "0", 0),
    "YOUTUBE_DAILY_QUOTA": (("youtube.daily_quota",), "20000", 20000),
    "YOUTUBE_COST_LIST": (("youtube.cost_list",), "3", 3),
    "YOUTUBE_COST_INSERT": (("youtube.cost_insert",), "40", 40),
    "YOUTUBE_COST_OTHER": (("youtube.cost_other",), "2", 2),
    "YOUTUBE_COST_MODERATION": (("youtube.cost_moderation",), "20", 20),
    "YOUTUBE_STREAM_HOURS": (("youtube.stream_hours",), "6", 6.0),
    "YOUTUBE_RESERVED_SENDS": (("youtube.reserved_sends",), "10", 10),
    "YOUTUBE_POLL_FLOOR_SECONDS": (("youtube.poll_floor_seconds",), "45", 45.0),
    "YOUTUBE_BROADCAST_CHECK_SECONDS": (("youtube.broadcast_check_seconds",), "60", 60.0),
    "YOUTUBE_MAX_PIECES": (("youtube.max_pieces",), "1", 1),
    "YOUTUBE_HTTP_TIMEOUT": (("youtube.http_timeout",), "10", 10.0),
}

SAMPLES.update(SAFETY_SAMPLES, **SUMMARY_SAMPLES, **RECALL_SAMPLES)
SAMPLES.update(ADMIN_SAMPLES)
SAMPLES.update(TWITCH_CONDUIT_SAMPLES)
SAMPLES.update(VOICE_SAMPLES)


def at(settings: Settings, path: str) -> Any:
    section, field = path.split(".")
    value = getattr(getattr(settings, section), field)
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def write_env(lines: str) -> None:
    Path(".env").write_text(lines, encoding="utf-8")  # the test's own empty cwd


def test_the_documented_list_is_read_from_both_files() -> None:
    documented = documented_variables()
    assert "CHORUS_HISTORY_MAX" in documented and "GOOGLE_API_KEY" in documented  # docs/
    assert "YOUTUBE_HTTP_TIMEOUT" in documented  # only in .env.example's platform sections
    assert set(documented) <= known_variables()


@pytest.mark.parametrize("variable", documented_variables())
def test_documented_variable_works_from_dotenv(variable: str) -> None:
    assert variable in SAMPLES, f"{variable} is documented: give it a sample in SAMPLES"
    paths, text, expected = SAMPLES[variable]
    write_env(f"{variable}={text}\n")
    settings = load_settings()
    defaults = Settings()
    for path in paths:
        assert at(settings, path) == expected, path
        assert at(defaults, path) != expected, f"the sample of {variable} is its default"
    assert settings.warnings == []


def test_the_environment_beats_dotenv(monkeypatch: pytest.MonkeyPatch) -> None:
    write_env("CHORUS_HISTORY_MAX=50\nCHORUS_BOT_NAME=FromFile\nOPENAI_API_KEY=sk-file\n")
    monkeypatch.setenv("CHORUS_HISTORY_MAX", "60")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    settings = load_settings()
    assert settings.state.history_max_messages == 60
    assert settings.llm.api_key("openai") == "sk-env"
    assert settings.agent.bot_name == "FromFile"  # what only .env sets still counts


def test_an_empty_value_is_unset_and_does_not_hide_dotenv(monkeypatch: pytest.MonkeyPatch) -> None:
    write_env("CHORUS_HISTORY_MAX=50\nCHORUS_HEALTH_PORT=\n")
    monkeypatch.setenv("CHORUS_HISTORY_MAX", "")
    settings = load_settings()
    assert settings.state.history_max_messages == 50
    assert settings.health.port == Settings().health.port


@pytest.mark.parametrize("place", ["environment", "dotenv"])
def test_an_unknown_name_is_warned_about_with_the_closest_known_one(
    place: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    if place == "environment":
        monkeypatch.setenv("CHORUS_HISTORY_MAXX", "80")
    else:
        write_env("CHORUS_HISTORY_MAXX=80\n")
    with caplog.at_level(logging.WARNING, logger="chorus.settings"):
        settings = load_settings()
    where = "in the environment" if place == "environment" else "in .env"
    warnings = [r for r in caplog.records if r.name == "chorus.settings"]
    assert [r.levelno for r in warnings] == [logging.WARNING]
    message = warnings[0].getMessage()
    assert "CHORUS_HISTORY_MAXX" in message and where in message
    assert "did you mean CHORUS_HISTORY_MAX?" in message
    assert settings.state.history_max_messages == Settings().state.history_max_messages


def test_one_line_per_unknown_name_even_when_in_both_places(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    write_env("CHORUS_HISTORY_MAXX=80\nCHORUS_ZZZZ=1\nDISCORD_SOMETHING=x\n")
    monkeypatch.setenv("CHORUS_HISTORY_MAXX", "90")
    monkeypatch.setenv("CHORUS_BLOCK_REAL_LLM", "1")  # an internal switch is a known name
    settings = load_settings(warn=False)
    assert caplog.records == []  # warn=False: kept for the caller to log
    assert settings.warnings == [
        "unknown setting CHORUS_HISTORY_MAXX in the environment and in .env is ignored; "
        "did you mean CHORUS_HISTORY_MAX?",
        "unknown setting CHORUS_ZZZZ in .env is ignored; no setting has a similar name",
    ]


@pytest.mark.parametrize("place", ["environment", "dotenv"])
def test_a_bad_value_names_the_variable_and_where_it_came_from(
    place: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if place == "environment":
        monkeypatch.setenv("CHORUS_HISTORY_MAX", "abc")
    else:
        write_env("CHORUS_HISTORY_MAX=abc\n")
    with pytest.raises(ConfigError) as info:
        load_settings()
    where = "in the environment" if place == "environment" else "in .env"
    assert f"CHORUS_HISTORY_MAX='abc' {where}: Input should be a valid integer" in str(info.value)


def test_every_bad_value_is_reported_at_once_and_secrets_are_not_echoed() -> None:
    write_env(
        "CHORUS_HEALTH_PORT=70000\n"
        "CHORUS_REDIS_URL=redis://:hunter2-pw@h:notaport/0\n"
        "TWITCH_MAX_PIECES=9\n"
    )
    with pytest.raises(ConfigError) as info:
        load_settings()
    message = str(info.value)
    assert "CHORUS_HEALTH_PORT='70000' in .env" in message
    assert "TWITCH_MAX_PIECES='9' in .env" in message
    assert "CHORUS_REDIS_URL=**** in .env: the port is not a number" in message
    assert "hunter2" not in message


def test_a_section_filled_by_field_name_yields_to_the_variables() -> None:
    """The shape a config file will fill: sections by field name, under env and .env."""
    write_env("CHORUS_HISTORY_MAX=70\n")
    settings = load_settings(
        environ={},
        sections={"state": {"history_max_messages": 80, "bus_namespace": "fromfile"}},
    )
    assert settings.state.history_max_messages == 70
    assert settings.state.bus_namespace == "fromfile"
    with pytest.raises(ConfigError, match=r"state\.history_max_messages \(CHORUS_HISTORY_MAX\)"):
        load_settings(environ={}, env_file=None, sections={"state": {"history_max_messages": 1}})


@pytest.mark.e2e
async def test_mcp_config_and_prices_from_dotenv_take_effect(tmp_path: Path) -> None:
    """The two variables that ``.env`` used to be ignored for, through the composition root."""
    (tmp_path / "mcp.json").write_text(
        json.dumps(
            {"mcpServers": {"echo": {"command": sys.executable, "args": [str(ECHO_SERVER)]}}}
        )
    )
    (tmp_path / "prices.json").write_text(
        json.dumps({"my-local-model": {"input": 2.0, "output": 4.0}})
    )
    write_env(
        "CHORUS_MODEL=openai:my-local-model\n"
        "OPENAI_BASE_URL=http://127.0.0.1:9/v1\n"
        f"CHORUS_MCP_CONFIG={tmp_path / 'mcp.json'}\n"
        "CHORUS_PRICES=prices.json\n"
        "CHORUS_REDIS_URL=memory://settings-sources\n"
    )
    app = await Chorus.from_settings(load_settings())
    try:
        assert "echo__add" in app.tools.names  # the MCP server of the .env file was started
        assert isinstance(app.metrics, Metrics)
        app.metrics.tokens("my-local-model", Usage(input_tokens=1_000_000, output_tokens=500_000))
        body, _ = await app.metrics.render()
        costs = [
            sample.value
            for family in text_string_to_metric_families(body.decode())
            for sample in family.samples
            if sample.name == "chorus_llm_cost_usd_total"
            and sample.labels.get("model") == "my-local-model"
        ]
        assert costs == [pytest.approx(4.0)]  # 1M input at 2.0 + 0.5M output at 4.0
    finally:
        await app.aclose()
