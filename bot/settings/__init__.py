"""The settings root: every setting Chorus reads, in one model with a section per concern.

Why one root: settings read by separate models and raw environment reads each decide for
themselves whether ``.env`` counts, and disagree. ``load_settings`` reads the sources once, at
the composition root (``bot/cli.py``), and hands each component its section.
Precedence: the process environment, then ``.env``, then ``chorus.toml`` (``bot/settings/file.py``),
then the defaults. Every variable keeps its documented name (``CHORUS_*``, the vendors' key
names, ``DISCORD_*``...) as the field's alias; the file fills a section by field name. Why the
file comes after ``.env``: the file is what a team shares and commits (personas, scopes), ``.env``
and the environment are what one machine or one deployment says (secrets, a host's override),
so the more local source wins, as it always did for ``.env`` over the defaults.

Errors name the variable, its value (never a secret's) and where it came from; a ``CHORUS_*``
name that no section reads is logged as a warning with the closest known name. The platform
sections are data only, so the core holds them without importing any platform SDK.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from bot.settings.agent import AgentSettings
from bot.settings.base import ConfigError, Section
from bot.settings.discord import DiscordSettings
from bot.settings.engagement import EngagementSettings
from bot.settings.file import CONFIG_VARIABLE, FileValues, find_config, read_config
from bot.settings.llm import (
    KEY_ENV,
    KEY_URL,
    NO_LLM_MESSAGE,
    PROVIDERS,
    FallbackSettings,
    LLMSettings,
    ModelSpec,
    parse_model_spec,
)
from bot.settings.memory import MemorySettings
from bot.settings.ops import AdminSettings, HealthSettings, LoggingSettings, MetricsSettings
from bot.settings.plugins import PluginSettings
from bot.settings.safety import QuotaSettings, SafetySettings
from bot.settings.scopes import FileSettings, check_scopes, scope_channels, scope_warnings
from bot.settings.slack import SlackSettings
from bot.settings.sources import (
    GIVEN,
    Value,
    read_env_file,
    read_environ,
    shown,
    unknown_variables,
)
from bot.settings.state import StateSettings, check_redis_url
from bot.settings.thanks import ThanksSettings
from bot.settings.tools import ToolSettings
from bot.settings.twitch import TwitchSettings
from bot.settings.voice import VoiceSettings
from bot.settings.youtube import YouTubeSettings

__all__ = [
    "KEY_ENV",
    "KEY_URL",
    "NO_LLM_MESSAGE",
    "PROVIDERS",
    "AgentSettings",
    "ConfigError",
    "DiscordSettings",
    "EngagementSettings",
    "FallbackSettings",
    "FileSettings",
    "HealthSettings",
    "LLMSettings",
    "LoggingSettings",
    "MemorySettings",
    "MetricsSettings",
    "ModelSpec",
    "PluginSettings",
    "QuotaSettings",
    "SafetySettings",
    "Settings",
    "SlackSettings",
    "StateSettings",
    "ThanksSettings",
    "VoiceSettings",
    "ToolSettings",
    "TwitchSettings",
    "YouTubeSettings",
    "check_redis_url",
    "restart_only_changes",
    "known_variables",
    "load_settings",
    "parse_model_spec",
    "settings_from",
]

log = logging.getLogger("chorus.settings")


class Settings(BaseModel):
    """Every setting, by concern. ``.env.example`` and docs/reference/settings.md (written from these models) document each
    variable."""

    llm: LLMSettings = Field(default_factory=LLMSettings)
    fallback: FallbackSettings = Field(default_factory=FallbackSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    state: StateSettings = Field(default_factory=StateSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    engagement: EngagementSettings = Field(default_factory=EngagementSettings)
    thanks: ThanksSettings = Field(default_factory=ThanksSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    plugins: PluginSettings = Field(default_factory=PluginSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    admin: AdminSettings = Field(default_factory=AdminSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    twitch: TwitchSettings = Field(default_factory=TwitchSettings)
    youtube: YouTubeSettings = Field(default_factory=YouTubeSettings)
    safety: SafetySettings = Field(default_factory=SafetySettings)
    quota: QuotaSettings = Field(default_factory=QuotaSettings)
    voice: VoiceSettings = Field(default_factory=VoiceSettings)
    file: FileSettings = Field(default_factory=FileSettings)

    _warnings: list[str] = PrivateAttr(default_factory=list)
    _variables: dict[str, Value] = PrivateAttr(default_factory=dict)  # environment over .env

    @property
    def warnings(self) -> list[str]:
        """What loading noticed but did not refuse (unknown ``CHORUS_*`` names)."""
        return list(self._warnings)

    def log_warnings(self) -> None:
        for line in self._warnings:
            log.warning(line)

    def origin(self, section: str, name: str) -> str:
        """Where a value came from: ``the environment (NAME)``, ``.env (NAME)``,
        ``chorus.toml:12`` or ``default``."""
        for variable, field in type(getattr(self, section)).variables().items():
            value = self._variables.get(variable) if field == name else None
            if value is not None:
                return f"{value.source} ({variable})"
        key = f"{section}.{name}"
        return self.file.where(key) if key in self.file.given else "default"

    def variable(self, name: str) -> str | None:
        """A variable's text as loaded (the environment over ``.env``), for what reads a name
        no section declares: a plugin's secrets (bot/plugins/config.py)."""
        value = self._variables.get(name)
        return value.text if value is not None else None

    def is_secret(self, section: str, name: str) -> bool:
        return "SecretStr" in str(type(getattr(self, section)).model_fields[name].annotation)

    def secret_values(self) -> list[str]:
        """Every secret's value, so the log formatter can mask any that leak into a message."""
        sections = (
            self.llm,
            self.state,
            self.discord,
            self.slack,
            self.twitch,
            self.youtube,
            self.safety,
            self.admin,
        )
        return [value for section in sections for value in section.secret_values()]


def _sections() -> dict[str, type[Section]]:
    sections: dict[str, type[Section]] = {}
    for name, info in Settings.model_fields.items():
        assert isinstance(info.annotation, type) and issubclass(info.annotation, Section)
        sections[name] = info.annotation
    return sections


def known_variables() -> set[str]:
    """Every variable some section reads."""
    return {name for section in _sections().values() for name in section.variables()}


def load_settings(
    *,
    environ: Mapping[str, str] | None = None,
    env_file: str | Path | None = ".env",
    sections: Mapping[str, Mapping[str, Any]] | None = None,
    config: str | Path | bool = True,
    warn: bool = True,
) -> Settings:
    """Read ``env_file``, the environment (``os.environ`` unless ``environ``) and the config
    file into the root.

    ``config``: True finds the file (``CHORUS_CONFIG``, else ``chorus.toml`` in the working
    directory, else none); a path reads that file; False reads none. ``sections`` are more
    values by section and field name (``{"state": {"history_max_messages": 80}}``), over the
    file's. Any variable set in the environment or ``.env`` wins over both. Raises one
    ``ConfigError`` listing every bad value (a file's with its line); logs (``warn``) or keeps in
    ``Settings.warnings`` one line per unknown ``CHORUS_*`` name and per scope that can match
    nothing.
    """
    from_file = read_env_file(env_file)
    from_env = read_environ(environ)
    variables = {**from_file, **from_env}
    found: FileValues | None = None
    if config is True:
        explicit = variables.get(CONFIG_VARIABLE)
        path = find_config(explicit.text if explicit else None)
    else:
        path = Path(config) if config else None
    if path is not None:
        found = read_config(path, _sections())
    by_field: dict[str, dict[str, Any]] = {
        name: dict(values) for name, values in (found.sections if found else {}).items()
    }
    for name, values in (sections or {}).items():
        by_field.setdefault(name, {}).update(values)
    if found is not None:
        by_field[FILE] = found.file
    settings = _validate(variables, by_field, found)
    settings._variables = variables
    settings._warnings = unknown_variables((from_env, from_file), known_variables())
    if found is not None:
        _apply_file(settings)
    if warn:
        settings.log_warnings()
    return settings


FILE = "file"

# What ``chorus reload`` (SIGHUP) applies to the running process; every other setting takes a
# restart: platform credentials and channel lists (the adapters are built once), the Redis URL
# and the bus, the vendors' keys and URLs, limits the running loops were built with.
LIVE = {
    FILE: set(FileSettings.model_fields) - {"path", "run_dir"},  # personas, scopes, prompts
    "agent": {"bot_name", "reasoning", "reasoning_max", "max_output_tokens", "vision"},
    "tools": {"tools_enabled", "tools_disabled"},
    "llm": {"model"},
    "fallback": {"models"},
    "memory": {"knowledge_paths"},  # indexed at once when a base already existed at start
    "engagement": set(EngagementSettings.model_fields) - {"pause_hours"},
}


def restart_only_changes(old: Settings, new: Settings) -> list[str]:
    """``section.field`` of each setting that differs between ``old`` and ``new`` and that a
    reload does not apply (values are never shown: some are secrets)."""
    changed = []
    for name in _sections():
        live = LIVE.get(name, set())
        before, after = getattr(old, name), getattr(new, name)
        for field in type(before).model_fields:
            if field not in live and getattr(before, field) != getattr(after, field):
                changed.append(f"{name}.{field}")
    return changed


def _apply_file(settings: Settings) -> None:
    """The file's cross-checks (one ``ConfigError``), its warnings, and the Discord and Slack
    channels its scopes engage in (added to the adapters' ambient and always-answer lists)."""
    problems = check_scopes(settings.file, settings.llm, settings.memory, settings.engagement)
    if problems:
        raise ConfigError("invalid configuration file:\n  " + "\n  ".join(problems))
    settings.discord, settings.slack = scope_channels(
        settings.file, settings.discord, settings.slack
    )
    configured = [
        name
        for name in ("discord", "slack", "twitch", "youtube")
        if getattr(settings, name).configured
    ]
    settings._warnings += scope_warnings(
        settings.file.scopes,
        configured=configured,
        twitch_channels=settings.twitch.channels,
        discord_allowed=settings.discord.allowed_channels,
    )


def settings_from(values: Mapping[str, str]) -> Settings:
    """The root from variables given directly (tests, benchmarks), checked like loaded ones."""
    return _validate({name: Value(text, GIVEN) for name, text in values.items() if text})


def _validate(
    values: Mapping[str, Value],
    by_field: Mapping[str, Mapping[str, Any]] | None = None,
    found: FileValues | None = None,
) -> Settings:
    flat = {name: value.text for name, value in values.items()}
    unknown = set(by_field or {}) - set(Settings.model_fields)
    if unknown:
        raise ConfigError(f"unknown settings sections: {', '.join(sorted(unknown))}")
    sections: dict[str, Any] = {}
    problems: list[str] = []
    for name, section in _sections().items():
        # A variable (the alias) wins over the same field given by name.
        given = {**(by_field or {}).get(name, {}), **flat}
        try:
            sections[name] = section.model_validate(given)
        except ValidationError as exc:
            problems += [_problem(name, section, error, values, found) for error in exc.errors()]
    if problems:
        raise ConfigError("invalid settings:\n  " + "\n  ".join(dict.fromkeys(problems)))
    return Settings(**sections)


def _problem(
    name: str,
    section: type[Section],
    error: Any,
    values: Mapping[str, Value],
    found: FileValues | None = None,
) -> str:
    variable = str(error["loc"][0]) if error["loc"] else ""
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix(f"{variable}: ")
    if variable in section.model_fields:  # given by field name, not by a variable
        key = f"{name}.{variable}"
        at = f"{found.where(key)}: " if found is not None else ""
        return f"{at}{key} ({section.variable_for(variable)}): {message}"
    value = values.get(variable)
    if value is None:  # a check across fields: its message names the variables
        return message
    field = section.variables().get(variable, "")
    secret = "SecretStr" in str(section.model_fields[field].annotation) if field else False
    secret = secret or "@" in value.text  # a URL with a password
    return f"{variable}{shown(value, secret=secret)}: {message}"
