"""Personas and scopes: the per-community part of ``chorus.toml``, as data.

A *scope* is a ``[[scope]]`` table whose ``match`` names a place: a platform (``discord``), a
server (``discord:GUILD``, ``slack:TEAM``; for Twitch, YouTube and the console the one level
there is, ``twitch:CHANNEL``) or a channel of a server (``discord:GUILD/CHANNEL``). A message
gets each setting from the most specific scope that sets it, then from the deployment (the
sections of the settings root), so ``discord`` can give every server a persona while
``discord:1/2`` changes only the tools of one channel.

Resolution is generic over the fields of ``Scope``: ``flatten`` turns a scope into dotted keys
(``engagement.mode``, ``tools.enabled``) and the most specific value of each key wins. Adding a
setting a scope may override is adding a field here plus the line of ``DEPLOYMENT`` that names
its deployment-wide default; nothing else in this module changes (``[scope.safety]`` and
``[scope.quota]`` came this way: ``bot.safety.policy`` turns them into the scope's rules).

Why the ``server`` of a message is learnt rather than keyed: a conversation key holds only the
platform and the channel (it names Redis keys, which must not change), so adapters put the
server (Discord guild, Slack team, Twitch channel login) on each ``ChatMessage``. A Discord
channel id is unique across guilds, so a ``GUILD/CHANNEL`` scope also matches a message whose
server is not known (a live-chat turn the bot started itself).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from bot.settings.base import ConfigError, Section
from bot.settings.discord import DiscordSettings
from bot.settings.engagement import EngagementSettings
from bot.settings.llm import LLMSettings, parse_model_spec
from bot.settings.memory import MemorySettings
from bot.settings.safety import ScopeQuota, ScopeSafety
from bot.settings.slack import SlackSettings
from bot.settings.voice import ScopeVoice

PLATFORMS = ("console", "discord", "slack", "twitch", "youtube")
SERVER_PLATFORMS = frozenset({"discord", "slack"})  # server/channel; the others: one level
LIVE_PLATFORMS = frozenset({"twitch", "youtube"})
DEFAULT_PERSONA = "default"
_ALLOWED = "DISCORD_ALLOWED_CHANNELS"

Mode = Literal["addressed", "ambient", "always"]
Reasoning = Literal["auto", "off", "low", "medium", "high"]
ReasoningMax = Literal["low", "medium", "high"]

_IDS = {  # what an id looks like where we cannot know the ids at start (warned when it does not)
    "discord": (re.compile(r"^\d{15,21}$"), re.compile(r"^\d{15,21}$"), "a snowflake (digits)"),
    "slack": (re.compile(r"^[TE][A-Z0-9]+$"), re.compile(r"^[CGD][A-Z0-9]+$"), "T.../C..."),
}


class _Table(BaseModel):
    """A table of the file: unknown keys are the loader's errors, values are checked here.
    Validators are built on first use (``defer_build``): most deployments have no scope."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Persona(_Table):
    """Who the bot is: ``prompt`` (or the text of ``prompt_file``) replaces the default identity
    paragraph of the system text; ``language`` and ``style`` add a line each."""

    name: str | None = Field(default=None, min_length=1, max_length=100)
    prompt: str | None = Field(default=None, min_length=1)
    prompt_file: Path | None = None
    language: str | None = Field(default=None, min_length=1, max_length=100)
    style: str | None = Field(default=None, min_length=1, max_length=500)
    # (Given both ``prompt`` and ``prompt_file``, the loader refuses; it reads the file and puts
    # its text in ``prompt``, keeping the file's full path in ``prompt_file``.)


class ScopeTools(_Table):
    """Replaces the deployment's tool lists (``[tools] tools_enabled/tools_disabled``) here."""

    enabled: frozenset[str] | None = None
    disabled: frozenset[str] | None = None


class ScopeEngagement(_Table):
    """When the bot speaks here, and the live-chat thresholds (``[engagement]``'s names)."""

    mode: Mode | None = None
    min_pending: int | None = None
    min_gap_seconds: float | None = None
    max_batch_chatters: int | None = None
    max_mention_batch: int | None = None
    channel_cooldown_seconds: float | None = None
    user_cooldown_seconds: float | None = None
    mention_burst: int | None = None
    wall_max_chars: int | None = None
    idle_prompt_after_seconds: float | None = None


class Scope(_Table):
    match: str
    persona: str | None = None
    model: str | None = None
    fallbacks: tuple[str, ...] | None = None
    reasoning: Reasoning | None = None
    reasoning_max: ReasoningMax | None = None
    tools: ScopeTools | None = None
    engagement: ScopeEngagement | None = None
    memory: bool | None = None
    insights: bool | None = None
    summary_ttl_days: int | None = Field(default=None, ge=1, le=3650)
    community_memory: bool | None = None
    safety: ScopeSafety | None = None
    quota: ScopeQuota | None = None
    knowledge: tuple[str, ...] | None = None
    voice: ScopeVoice | None = None
    # ``[scope.plugins.NAME]``: a plugin's settings here, over its ``[plugins.NAME]``; checked
    # by the plugin's own model when it loads (bot/plugins/config.py), not by the file's loader.
    plugins: dict[str, dict[str, Any]] | None = None

    @field_validator("match")
    @classmethod
    def _check_match(cls, value: str) -> str:
        parse_match(value)
        return value

    @property
    def where(self) -> ScopeMatch:
        return parse_match(self.match)


# Each key a scope may set -> the deployment setting it overrides: (section, field) of the
# settings root, or None when the deployment has no setting of its own (the value is shown
# as the platform's behaviour).
DEPLOYMENT: dict[str, tuple[str, str] | None] = {
    "persona": None,
    "model": ("llm", "model"),
    "fallbacks": ("fallback", "models"),
    "reasoning": ("agent", "reasoning"),
    "reasoning_max": ("agent", "reasoning_max"),
    "tools.enabled": ("tools", "tools_enabled"),
    "tools.disabled": ("tools", "tools_disabled"),
    "engagement.mode": None,
    **{f"engagement.{f}": ("engagement", f) for f in ScopeEngagement.model_fields if f != "mode"},
    "memory": None,
    "insights": ("memory", "insights_enabled"),
    "summary_ttl_days": ("memory", "summary_ttl_days"),
    "community_memory": ("memory", "community_memory"),
    **{f"safety.{f}": ("safety", f) for f in ScopeSafety.model_fields if f != "moderation_model"},
    "safety.moderation_model": ("safety", "model"),
    **{f"quota.{f}": ("quota", f) for f in ScopeQuota.model_fields},
    "knowledge": ("memory", "knowledge_paths"),
    **{f"voice.{f}": ("voice", f) for f in ScopeVoice.model_fields},
}


class FileSettings(Section):
    """What only ``chorus.toml`` says (and where it is): personas, scopes, prompt overrides.

    ``path`` is ``CHORUS_CONFIG``; the rest is filled by the loader (``bot/settings/file.py``),
    which also keeps the line of every key (``lines``, by dotted path such as
    ``scope.0.persona``) and the texts of the persona and prompt files it read."""

    path: Path | None = Field(default=None, validation_alias="CHORUS_CONFIG")
    """The configuration file: personas, scopes, prompt overrides, plugins, any setting by name;
    unset: `./chorus.toml` when it exists."""
    # Where each running ``chorus run``/``chat`` leaves its pid, for ``chorus reload``.
    run_dir: Path = Field(default=Path(".chorus/run"), validation_alias="CHORUS_RUN_DIR")
    """Where each running `chorus run`/`chat` leaves its pid for `chorus reload`."""
    persona: Persona = Field(default_factory=Persona)
    """`[persona]`: who the bot is wherever no scope picks another persona (name, prompt or
    prompt_file, language, style)."""
    personas: dict[str, Persona] = Field(default_factory=dict)
    """`[personas.NAME]`: more personas, for scopes to pick by name."""
    scopes: tuple[Scope, ...] = ()
    """`[[scope]]`: settings for the messages of one platform, server or channel (`match`)."""
    prompts: dict[str, Path] = Field(default_factory=dict)
    """`[prompts]`: texts of `prompts/` replaced by files, by name (`"live/batch" = "batch.md"`)."""
    # Filled by the loader:
    found: Path | None = None  # the file that was read
    given: frozenset[str] = frozenset()  # the settings it gave, as section.field
    lines: dict[str, int] = Field(default_factory=dict)
    prompt_texts: dict[str, str] = Field(default_factory=dict)
    # ``[plugins.NAME]`` tables by plugin name, as written (each plugin's model checks them).
    plugins: dict[str, dict[str, Any]] = Field(default_factory=dict)

    def where(self, key: str) -> str:
        """``chorus.toml:12`` for a dotted key (its table's line when the key has none)."""
        if self.found is None:
            return "(no file)"
        parts = key.split(".")
        while parts:
            line = self.lines.get(".".join(parts))
            if line is not None:
                return f"{self.found}:{line}"
            parts.pop()
        return str(self.found)

    def persona_named(self, name: str | None) -> Persona:
        if name is None or name == DEFAULT_PERSONA:
            return self.persona
        return self.personas[name]


@dataclass(frozen=True, slots=True)
class ScopeMatch:
    platform: str
    server: str | None = None
    channel: str | None = None

    @property
    def level(self) -> int:
        """0 platform, 1 server, 2 channel: the higher, the more specific."""
        return 0 if self.server is None else 1 if self.channel is None else 2

    def matches(self, platform: str, server: str | None, channel: str) -> bool:
        if platform != self.platform:
            return False
        if self.server is None:
            return True
        if platform in SERVER_PLATFORMS:
            if self.channel is None:
                return server == self.server
            return channel == self.channel and server in (None, self.server)
        # Twitch, YouTube, console: the one level is the channel (or the Twitch login).
        return self.server == channel or (server is not None and self.server == server.lower())


def parse_match(text: str) -> ScopeMatch:
    """``platform``, ``platform:server`` or ``platform:server/channel``; ValueError says why not."""
    platform, sep, rest = text.strip().partition(":")
    if platform not in PLATFORMS:
        close = difflib.get_close_matches(platform, PLATFORMS, n=1, cutoff=0.5)
        hint = f"did you mean {close[0]!r}?" if close else f"use one of {', '.join(PLATFORMS)}"
        raise ValueError(f"unknown platform {platform!r} in match {text!r}; {hint}")
    if not sep:
        return ScopeMatch(platform)
    server, slash, channel = rest.partition("/")
    if not server.strip() or (slash and not channel.strip()):
        raise ValueError(f"match {text!r} has an empty part; write {platform}:SERVER/CHANNEL")
    if slash and platform not in SERVER_PLATFORMS:
        raise ValueError(f"{platform} has no servers: write {platform}:CHANNEL, not {text!r}")
    if platform == "twitch":
        server = server.lstrip("#").lower()
    return ScopeMatch(platform, server.strip(), channel.strip() if slash else None)


def flatten(table: BaseModel, prefix: str = "") -> dict[str, Any]:
    """The keys a table sets (nested tables as dotted keys), without ``match`` and without the
    plugins' tables (each plugin resolves its own: bot/plugins/config.py)."""
    found: dict[str, Any] = {}
    for name in type(table).model_fields:
        value = getattr(table, name)
        if name in ("match", "plugins") or value is None:
            continue
        if isinstance(value, BaseModel):
            found.update(flatten(value, f"{prefix}{name}."))
        else:
            found[f"{prefix}{name}"] = value
    return found


@dataclass(frozen=True)
class Resolved:
    """What the scopes say for one place: the matching scopes (least specific first, as indexes
    of ``FileSettings.scopes``), and each key they set with the index of the scope it is from."""

    scopes: tuple[int, ...]
    values: Mapping[str, Any]
    origin: Mapping[str, int]


def resolve(scopes: tuple[Scope, ...], platform: str, server: str | None, channel: str) -> Resolved:
    matched = sorted(
        (i for i, scope in enumerate(scopes) if scope.where.matches(platform, server, channel)),
        key=lambda i: scopes[i].where.level,
    )
    values: dict[str, Any] = {}
    origin: dict[str, int] = {}
    for index in matched:  # least specific first: a more specific scope overwrites
        for key, value in flatten(scopes[index]).items():
            values[key], origin[key] = value, index
    return Resolved(tuple(matched), values, origin)


def scope_warnings(
    scopes: Iterable[Scope],
    *,
    configured: Iterable[str],
    twitch_channels: Iterable[str],
    discord_allowed: frozenset[int],
) -> list[str]:
    """A line for each scope that can match nothing we can know about at start: a platform
    that is not configured, a Twitch channel the bot does not join, a Discord channel outside
    ``DISCORD_ALLOWED_CHANNELS``, and (ids being unknowable at start) a Discord or Slack id
    that does not look like one."""
    ready = set(configured) | {"console"}
    joined = {c.lower() for c in twitch_channels}
    lines = []
    for scope in scopes:
        where, label = scope.where, f"scope {scope.match!r}"
        if where.platform not in ready:
            lines.append(f"{label} matches nothing: {where.platform} is not configured")
        elif where.platform in _IDS:
            server_id, channel_id, looks = _IDS[where.platform]
            for part, pattern in ((where.server, server_id), (where.channel, channel_id)):
                if part is not None and not pattern.match(part):
                    lines.append(f"{label} matches nothing: {part!r} is not an id ({looks})")
            if (
                where.platform == "discord"
                and where.channel
                and where.channel.isdigit()
                and discord_allowed
                and int(where.channel) not in discord_allowed
            ):
                lines.append(f"{label} matches nothing: its channel is not allowed by {_ALLOWED}")
        elif (
            where.platform == "twitch"
            and where.server
            and not where.server.isdigit()
            and where.server not in joined
        ):
            lines.append(f"{label} matches nothing: {where.server!r} is not in TWITCH_CHANNELS")
    return lines


def check_scopes(
    file: FileSettings, llm: LLMSettings, memory: MemorySettings, engagement: EngagementSettings
) -> list[str]:
    """What the file's keys cannot say alone, one line per problem with its place: a persona
    name nobody defined, two scopes with one match, a model without its key, thresholds the
    engagement section refuses, ``always`` on a live chat, insights where none run."""
    problems: list[str] = []
    seen: dict[ScopeMatch, int] = {}
    names = [DEFAULT_PERSONA, *file.personas]
    for index, scope in enumerate(file.scopes):

        def at(key: str, index: int = index, scope: Scope = scope) -> str:
            return f"{file.where(f'scope.{index}.{key}')}: [[scope]] {scope.match!r}: {key}"

        where = scope.where
        if where in seen:
            other = file.where(f"scope.{seen[where]}.match")
            problems.append(f"{at('match')}: the same match as the scope at {other}")
        seen.setdefault(where, index)
        if scope.persona is not None and scope.persona not in names:
            close = difflib.get_close_matches(scope.persona, names, n=1, cutoff=0.5)
            hint = f"did you mean {close[0]!r}?" if close else "define it as [personas.NAME]"
            problems.append(f"{at('persona')}: no persona named {scope.persona!r}; {hint}")
        models = [("model", scope.model)] if scope.model else []
        for key, text in [*models, *(("fallbacks", text) for text in scope.fallbacks or ())]:
            try:
                llm.require_credentials(parse_model_spec(text, key).provider)
            except ConfigError as exc:
                problems.append(f"{at(key)}: {exc}")
        settings = flatten(scope.engagement) if scope.engagement else {}
        if settings.pop("mode", None) == "always" and where.platform in LIVE_PLATFORMS:
            problems.append(
                f"{at('engagement.mode')}: 'always' is not for live chats (every line would be "
                "answered); use 'ambient' or 'addressed'"
            )
        try:
            EngagementSettings.model_validate(engagement.model_dump() | settings)
        except ValidationError as exc:
            for error in exc.errors():
                key = ".".join(str(part) for part in error["loc"])
                problems.append(f"{at(f'engagement.{key}')}: {error['msg']}")
        if scope.community_memory and not (memory.insights_enabled and memory.summaries_enabled):
            problems.append(
                f"{at('community_memory')}: community notes are written by the insights worker's "
                "summary pass, which is off (CHORUS_INSIGHTS_ENABLED / CHORUS_SUMMARIES)"
            )
        if scope.insights and not memory.insights_enabled:
            problems.append(
                f"{at('insights')}: the insights worker is off for the deployment "
                "(CHORUS_INSIGHTS_ENABLED / [memory] insights_enabled); turn it on there and "
                "off in the scopes that should not have it"
            )
    return problems


def scope_channels(
    file: FileSettings, discord: DiscordSettings, slack: SlackSettings
) -> tuple[DiscordSettings, SlackSettings]:
    """The Discord and Slack adapters publish unaddressed messages only from their ambient and
    always-answer channels: a channel scope with ``engagement.mode`` ambient or always is added
    to that list (a server- or platform-wide mode applies to the channels the adapter hears)."""
    lists: dict[tuple[str, str], set[str]] = {}
    for scope in file.scopes:
        where, mode = scope.where, scope.engagement.mode if scope.engagement else None
        if where.channel and where.platform in SERVER_PLATFORMS and mode in ("ambient", "always"):
            lists.setdefault((where.platform, str(mode)), set()).add(where.channel)
    if not lists:
        return discord, slack

    def ids(platform: str, mode: str) -> set[str]:
        return lists.get((platform, mode), set())

    discord = discord.model_copy(
        update={
            "ambient_channels": discord.ambient_channels
            | {int(c) for c in ids("discord", "ambient") if c.isdigit()},
            "always_answer_channels": discord.always_answer_channels
            | {int(c) for c in ids("discord", "always") if c.isdigit()},
        }
    )
    slack = slack.model_copy(
        update={
            "ambient_channels": slack.ambient_channels | ids("slack", "ambient"),
            "always_answer_channels": slack.always_answer_channels | ids("slack", "always"),
        }
    )
    return discord, slack
