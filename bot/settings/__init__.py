"""The settings root: every setting Chorus reads, in one model with a section per concern.

Why one root: settings used to be read by ten separate models and a few raw environment reads,
each deciding for itself whether ``.env`` counted (two did not). Now ``load_settings`` reads the
sources once, at the composition root (``bot/cli.py``), and hands each component its section.
Precedence: the process environment, then ``.env``, then the defaults. Every variable keeps its
documented name (``CHORUS_*``, the vendors' key names, ``DISCORD_*``...) as the field's alias; a
section is filled by field name too, which is how a config file can fill this same root later.

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
from bot.settings.ops import HealthSettings, LoggingSettings, MetricsSettings
from bot.settings.plugins import PluginSettings
from bot.settings.safety import QuotaSettings, SafetySettings
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
from bot.settings.tools import ToolSettings
from bot.settings.twitch import TwitchSettings
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
    "ToolSettings",
    "TwitchSettings",
    "YouTubeSettings",
    "check_redis_url",
    "known_variables",
    "load_settings",
    "parse_model_spec",
    "settings_from",
]

log = logging.getLogger("chorus.settings")


class Settings(BaseModel):
    """Every setting, by concern. ``.env.example`` and README document each variable."""

    llm: LLMSettings = Field(default_factory=LLMSettings)
    fallback: FallbackSettings = Field(default_factory=FallbackSettings)
    agent: AgentSettings = Field(default_factory=AgentSettings)
    state: StateSettings = Field(default_factory=StateSettings)
    memory: MemorySettings = Field(default_factory=MemorySettings)
    engagement: EngagementSettings = Field(default_factory=EngagementSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    plugins: PluginSettings = Field(default_factory=PluginSettings)
    health: HealthSettings = Field(default_factory=HealthSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    discord: DiscordSettings = Field(default_factory=DiscordSettings)
    slack: SlackSettings = Field(default_factory=SlackSettings)
    twitch: TwitchSettings = Field(default_factory=TwitchSettings)
    youtube: YouTubeSettings = Field(default_factory=YouTubeSettings)
    safety: SafetySettings = Field(default_factory=SafetySettings)
    quota: QuotaSettings = Field(default_factory=QuotaSettings)

    _warnings: list[str] = PrivateAttr(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """What loading noticed but did not refuse (unknown ``CHORUS_*`` names)."""
        return list(self._warnings)

    def log_warnings(self) -> None:
        for line in self._warnings:
            log.warning(line)

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
    warn: bool = True,
) -> Settings:
    """Read ``env_file`` and the environment (``os.environ`` unless ``environ``) into the root.

    ``sections`` are values by section and field name (``{"state": {"history_max_messages":
    80}}``), the shape a config file gives; any variable set in the environment or ``.env``
    wins over them. Raises one ``ConfigError`` listing every bad value; logs (``warn``) or
    keeps in ``Settings.warnings`` one line per unknown ``CHORUS_*`` name.
    """
    from_file = read_env_file(env_file)
    from_env = read_environ(environ)
    settings = _validate({**from_file, **from_env}, sections or {})
    settings._warnings = unknown_variables((from_env, from_file), known_variables())
    if warn:
        settings.log_warnings()
    return settings


def settings_from(values: Mapping[str, str]) -> Settings:
    """The root from variables given directly (tests, benchmarks), checked like loaded ones."""
    return _validate({name: Value(text, GIVEN) for name, text in values.items() if text})


def _validate(
    values: Mapping[str, Value], by_field: Mapping[str, Mapping[str, Any]] | None = None
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
            problems += [_problem(name, section, error, values) for error in exc.errors()]
    if problems:
        raise ConfigError("invalid settings:\n  " + "\n  ".join(dict.fromkeys(problems)))
    return Settings(**sections)


def _problem(name: str, section: type[Section], error: Any, values: Mapping[str, Value]) -> str:
    variable = str(error["loc"][0]) if error["loc"] else ""
    message = str(error["msg"]).removeprefix("Value error, ").removeprefix(f"{variable}: ")
    if variable in section.model_fields:  # given by field name, not by a variable
        return f"{name}.{variable} ({section.variable_for(variable)}): {message}"
    value = values.get(variable)
    if value is None:  # a check across fields: its message names the variables
        return message
    field = section.variables().get(variable, "")
    secret = "SecretStr" in str(section.model_fields[field].annotation) if field else False
    secret = secret or "@" in value.text  # a URL with a password
    return f"{variable}{shown(value, secret=secret)}: {message}"
