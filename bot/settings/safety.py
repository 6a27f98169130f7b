"""``CHORUS_SAFETY_*``, ``CHORUS_MODERATION_*``, ``CHORUS_USERS_*`` and ``CHORUS_QUOTA_*``: what
the bot refuses to read or say, who it ignores, and how much anyone can make it spend.

Why only data here: the rules themselves (normalising text, the shipped lists, the presets) are
``bot.safety``'s; this section says which variable fills which field and refuses what can be
refused at load: a regular expression that does not compile is named with its variable and its
pattern, a user entry without its platform is named too. Fields left ``None`` take their value
from the preset (``CHORUS_SAFETY_PRESET``), so "streamer" can mean stricter defaults without
overriding what an operator set explicitly.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from bot.settings.base import Section, comma_set, comma_tuple

Preset = Literal["standard", "streamer", "off"]
Action = Literal["refuse", "ignore", "log"]
LinkPolicy = Literal["allow", "deny", "domains"]
InjectionAction = Literal["off", "log", "block"]


def _lines(value: Any) -> Any:
    """One regular expression per line (commas are part of many patterns)."""
    if isinstance(value, str):
        return tuple(dict.fromkeys(line.strip() for line in value.splitlines() if line.strip()))
    return value


def check_pattern(pattern: str) -> None:
    """Raise ``ValueError`` naming ``pattern`` when it does not compile."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None


def clean_domains(value: frozenset[str]) -> frozenset[str]:
    """Lower-cased domain names (``*.`` dropped); ``ValueError`` names one that is not."""
    domains = frozenset(d.lower().strip(".").removeprefix("*.") for d in value)
    for domain in domains:
        if not re.fullmatch(r"[a-z0-9-]+(\.[a-z0-9-]+)+", domain):
            raise ValueError(f"{domain!r} is not a domain name (e.g. example.com)")
    return domains


def check_user_entry(entry: str) -> None:
    platform, sep, user_id = entry.partition(":")
    if not sep or not user_id or not re.fullmatch(r"[a-z0-9_]+", platform):
        raise ValueError(f"{entry!r} is not platform:user_id (e.g. twitch:12345)")


class SafetySettings(Section):
    preset: Preset = Field(default="standard", validation_alias="CHORUS_SAFETY_PRESET")
    """`standard`, `streamer` or `off`: the defaults of the rules below."""
    preset_platforms: frozenset[str] = Field(
        default=frozenset({"twitch", "youtube"}),
        validation_alias="CHORUS_SAFETY_PRESET_PLATFORMS",
    )
    """Where `streamer` applies; `standard` elsewhere."""
    words: tuple[str, ...] = Field(default=(), validation_alias="CHORUS_MODERATION_WORDS")
    """Comma list of extra blocked words and phrases."""
    patterns: tuple[str, ...] = Field(default=(), validation_alias="CHORUS_MODERATION_PATTERNS")
    """Regular expressions, one per line (a list in `chorus.toml`), matched case-insensitively."""
    list_file: Path | None = Field(default=None, validation_alias="CHORUS_MODERATION_LIST_FILE")
    """A file: one word or phrase per line, `re:<pattern>` for a regular expression, `#` comments.
    """
    default_lists: bool = Field(default=True, validation_alias="CHORUS_MODERATION_DEFAULT_LISTS")
    """The shipped slur and harassment lists."""
    action: Action = Field(default="refuse", validation_alias="CHORUS_MODERATION_ACTION")
    """A flagged message: `refuse`, `ignore` or `log`."""
    links: LinkPolicy | None = Field(default=None, validation_alias="CHORUS_MODERATION_LINKS")
    """`allow`, `deny`, or `domains` (only `CHORUS_MODERATION_LINK_DOMAINS`); unset: the preset's.
    """
    link_domains: frozenset[str] = Field(
        default=frozenset(), validation_alias="CHORUS_MODERATION_LINK_DOMAINS"
    )
    """Comma list of allowed domains (subdomains included); setting it implies `domains`."""
    personal_data: bool | None = Field(
        default=None, validation_alias="CHORUS_MODERATION_PERSONAL_DATA"
    )
    """Refuse e-mail addresses, phone numbers, cards, IP addresses in and out; unset: the preset's.
    """
    injection: InjectionAction | None = Field(
        default=None, validation_alias="CHORUS_MODERATION_INJECTION"
    )
    """Injection phrases: `off`, `log` or `block`; unset: the preset's."""
    model: str | None = Field(default=None, validation_alias="CHORUS_MODERATION_MODEL")
    """A moderation model: `openai:omni-moderation-latest`, or any `provider:model` classifying
    against the rules."""
    rules_file: Path | None = Field(default=None, validation_alias="CHORUS_MODERATION_RULES_FILE")
    """The community's rules for a classifying model; unset: `prompts/safety/rules.md`."""
    timeout: float = Field(default=3.0, gt=0, le=60, validation_alias="CHORUS_MODERATION_TIMEOUT")
    """Seconds per moderation call."""
    fail: Literal["open", "closed"] | None = Field(
        default=None, validation_alias="CHORUS_MODERATION_FAIL"
    )
    """`open` or `closed` when the moderation model fails; unset: the preset's."""
    canary: bool = Field(default=True, validation_alias="CHORUS_SAFETY_CANARY")
    """The system prompt's canary and the leak check."""
    canary_secret: SecretStr | None = Field(
        default=None, validation_alias="CHORUS_SAFETY_CANARY_SECRET"
    )
    """The deployment's secret: the canary and the audit trail's fingerprint key are derived from
    it; unset: the model keys."""
    audit_max_entries: int = Field(
        default=10_000, ge=100, le=10_000_000, validation_alias="CHORUS_AUDIT_MAX_ENTRIES"
    )
    """Entries kept in the audit stream."""
    blocked_users: frozenset[str] = Field(
        default=frozenset(), validation_alias="CHORUS_USERS_BLOCKED"
    )
    """Comma list of `platform:user_id` the bot ignores in every channel."""
    allowed_users: frozenset[str] = Field(
        default=frozenset(), validation_alias="CHORUS_USERS_ALLOWED"
    )
    """Comma list of `platform:user_id` trusted in every channel (no quotas, links allowed)."""

    @field_validator(
        "preset_platforms", "link_domains", "blocked_users", "allowed_users", mode="before"
    )
    @classmethod
    def _split_set(cls, value: Any) -> Any:
        return comma_set(value)

    @field_validator("words", mode="before")
    @classmethod
    def _split_words(cls, value: Any) -> Any:
        return comma_tuple(value)

    @field_validator("patterns", mode="before")
    @classmethod
    def _split_patterns(cls, value: Any) -> Any:
        return _lines(value)

    @field_validator("patterns")
    @classmethod
    def _check_patterns(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for pattern in value:
            check_pattern(pattern)
        return value

    @field_validator("link_domains")
    @classmethod
    def _check_domains(cls, value: frozenset[str]) -> frozenset[str]:
        return clean_domains(value)

    @field_validator("blocked_users", "allowed_users")
    @classmethod
    def _check_users(cls, value: frozenset[str]) -> frozenset[str]:
        for entry in value:
            check_user_entry(entry)
        return value

    @field_validator("list_file", "rules_file", "model", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    def secret_values(self) -> list[str]:
        secret = self.canary_secret.get_secret_value() if self.canary_secret else ""
        return [secret] if secret else []


def _limit(variable: str) -> Any:
    return Field(default=None, ge=1, validation_alias=variable)


class QuotaSettings(Section):
    """Per user and per channel, messages and tokens, per hour and per UTC day; unset: no
    limit. ``cost_usd_per_day`` caps the whole deployment's estimated spend per UTC day."""

    user_messages_hour: int | None = _limit("CHORUS_QUOTA_USER_MESSAGES_HOUR")
    """Messages per user per UTC hour; unset: no limit."""
    user_messages_day: int | None = _limit("CHORUS_QUOTA_USER_MESSAGES_DAY")
    """Messages per user per UTC day; unset: no limit."""
    user_tokens_hour: int | None = _limit("CHORUS_QUOTA_USER_TOKENS_HOUR")
    """Tokens per user per UTC hour (all input, cached included, plus output); unset: no limit."""
    user_tokens_day: int | None = _limit("CHORUS_QUOTA_USER_TOKENS_DAY")
    """Tokens per user per UTC day; unset: no limit."""
    channel_messages_hour: int | None = _limit("CHORUS_QUOTA_CHANNEL_MESSAGES_HOUR")
    """Messages per channel per UTC hour (a thread counts to its channel); unset: no limit."""
    channel_messages_day: int | None = _limit("CHORUS_QUOTA_CHANNEL_MESSAGES_DAY")
    """Messages per channel per UTC day; unset: no limit."""
    channel_tokens_hour: int | None = _limit("CHORUS_QUOTA_CHANNEL_TOKENS_HOUR")
    """Tokens per channel per UTC hour; unset: no limit."""
    channel_tokens_day: int | None = _limit("CHORUS_QUOTA_CHANNEL_TOKENS_DAY")
    """Tokens per channel per UTC day; unset: no limit."""
    cost_usd_per_day: float | None = Field(
        default=None, gt=0, validation_alias="CHORUS_QUOTA_COST_USD_DAY"
    )
    """The deployment's estimated spend per UTC day, in USD, every model call included (reserved
    before each call); unset: no cap."""
    exempt_moderators: bool = Field(default=True, validation_alias="CHORUS_QUOTA_EXEMPT_MODERATORS")
    """Moderators skip the per-user and per-channel limits."""


# -- per scope (chorus.toml ``[scope.safety]`` and ``[scope.quota]``) ----------------------------
class _ScopeTable(BaseModel):
    """A scope's table: unknown keys are the loader's errors; ``None`` keeps the deployment's.
    Validators are built on first use (``defer_build``): most deployments have no scope."""

    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class ScopeSafety(_ScopeTable):
    """What a scope changes of the deployment's moderation (``bot.safety.policy`` applies it).

    ``words`` and ``patterns`` are added to the deployment's lists (which always apply unless
    the preset is ``off``); a more specific scope's ``words`` replace a broader scope's. User
    entries are bare user ids: the scope's platform is implied."""

    preset: Preset | None = None
    words: tuple[str, ...] | None = None
    patterns: tuple[str, ...] | None = None
    links: LinkPolicy | None = None
    link_domains: frozenset[str] | None = None
    personal_data: bool | None = None
    injection: InjectionAction | None = None
    action: Action | None = None
    moderation_model: bool | None = None
    fail: Literal["open", "closed"] | None = None
    blocked_users: frozenset[str] | None = None
    allowed_users: frozenset[str] | None = None

    @field_validator("patterns")
    @classmethod
    def _check_patterns(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for pattern in value or ():
            check_pattern(pattern)
        return value

    @field_validator("link_domains")
    @classmethod
    def _check_domains(cls, value: frozenset[str] | None) -> frozenset[str] | None:
        return None if value is None else clean_domains(value)

    @field_validator("blocked_users", "allowed_users")
    @classmethod
    def _check_ids(cls, value: frozenset[str] | None) -> frozenset[str] | None:
        for entry in value or ():
            if not entry.strip() or ":" in entry or any(c.isspace() for c in entry):
                raise ValueError(f"{entry!r} is not a user id (the scope names the platform)")
        return value


def _scope_limit() -> Any:
    return Field(default=None, ge=1)


class ScopeQuota(_ScopeTable):
    """A scope's per-user and per-channel limits (``[quota]``'s names); the daily cost cap is
    the deployment's alone (``CHORUS_QUOTA_COST_USD_DAY``)."""

    user_messages_hour: int | None = _scope_limit()
    user_messages_day: int | None = _scope_limit()
    user_tokens_hour: int | None = _scope_limit()
    user_tokens_day: int | None = _scope_limit()
    channel_messages_hour: int | None = _scope_limit()
    channel_messages_day: int | None = _scope_limit()
    channel_tokens_hour: int | None = _scope_limit()
    channel_tokens_day: int | None = _scope_limit()
    exempt_moderators: bool | None = None
