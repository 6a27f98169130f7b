"""Discord settings: one section of the settings root, data only (no discord.py import).

``DISCORD_TOKEN`` switches the adapter on. Channel lists are comma-separated channel ids (copy
them with Developer Mode on: right-click a channel, "Copy Channel ID"). The two URL overrides
exist for loopback tests and proxies: discord.py exposes its endpoints only as class attributes
(``discord.http.Route.BASE``, ``discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY``), so the
adapter sets them just before it connects, never at import. Problems surface as ``ConfigError``
naming the variable and where to find its value.

Sharding: ``DISCORD_SHARD_COUNT`` (default: the count Discord's ``GET /gateway/bot``
recommends) and ``DISCORD_SHARD_IDS``, the range of shards this gateway process connects
(``0-1``, ``3``, or a comma list of either; default all of them), or, for a StatefulSet whose
pods cannot each be given their own range, ``DISCORD_GATEWAY_INDEX`` (the pod's name or ordinal)
of ``DISCORD_GATEWAY_COUNT`` (the replicas), which picks an equal block of shards. The range is parsed here so a
typo stops the start with the variable named; whether it fits a count Discord recommends is
checked by the adapter once it knows that count.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, SecretStr, field_validator, model_validator

from bot.settings.base import Section

PORTAL_URL = "https://discord.com/developers/applications"
ChannelSet = frozenset[int]
_API_PATH = re.compile(r"/api/v\d+$")


class DiscordSettings(Section):
    """Every variable the Discord adapter reads (documented in ``.env.example``)."""

    token: SecretStr | None = Field(default=None, validation_alias="DISCORD_TOKEN")
    """The Discord bot's token (discord.com/developers/applications, Bot, Reset Token); setting it
    turns the Discord adapter on."""
    message_content_intent: bool = Field(
        default=False, validation_alias="DISCORD_MESSAGE_CONTENT_INTENT"
    )
    """Ask for the privileged Message Content intent (also switch it on in the Developer Portal:
    Bot, Message Content Intent); needed to read ambient and always-answer channels."""
    members_intent: bool = Field(default=False, validation_alias="DISCORD_MEMBERS_INTENT")
    """Ask for the privileged Server Members intent (also switch it on in the Developer Portal):
    plugins' member join and leave events."""
    answer_bots: bool = Field(default=False, validation_alias="DISCORD_ANSWER_BOTS")
    """Answer other bots (never itself)."""
    allowed_channels: ChannelSet = Field(
        default=frozenset(), validation_alias="DISCORD_ALLOWED_CHANNELS"
    )
    """Comma list of channel ids where the bot may speak; empty: everywhere."""
    always_answer_channels: ChannelSet = Field(
        default=frozenset(), validation_alias="DISCORD_ALWAYS_ANSWER_CHANNELS"
    )
    """Comma list of channel ids where the bot answers every message."""
    ambient_channels: ChannelSet = Field(
        default=frozenset(), validation_alias="DISCORD_AMBIENT_CHANNELS"
    )
    """Comma list of channel ids where the engagement policy decides when to speak."""
    sync_commands: bool = Field(default=True, validation_alias="DISCORD_SYNC_COMMANDS")
    """Register the `/chorus` slash commands (and plugins' commands) at start."""
    api_base_url: str | None = Field(default=None, validation_alias="DISCORD_API_BASE_URL")
    """Discord's REST base, ending in `/api/v10` (proxies and tests)."""
    gateway_url: str | None = Field(default=None, validation_alias="DISCORD_GATEWAY_URL")
    """Discord's gateway URL (proxies and tests)."""
    typing_timeout: float = Field(default=90.0, gt=0, validation_alias="DISCORD_TYPING_TIMEOUT")
    """Seconds the typing indicator may run."""
    command_timeout: float = Field(
        default=600.0, gt=0, le=900, validation_alias="DISCORD_COMMAND_TIMEOUT"
    )
    """Seconds a slash command's interaction may wait for its answer."""

    shard_count: int | None = Field(default=None, ge=1, validation_alias="DISCORD_SHARD_COUNT")
    """How many shards the bot's gateway connections are split into, across every gateway
    process (each the same number); unset: the count Discord recommends (GET /gateway/bot).
    Discord requires sharding from 2,500 servers on, about one shard per 1,000 servers."""
    shard_ids: tuple[int, ...] | None = Field(default=None, validation_alias="DISCORD_SHARD_IDS")
    """The shards this gateway process connects, as a range like `0-1` (or `3`, or a comma list
    of either); unset: every shard, all in this one process. Give each gateway process its own
    range; together they must cover every shard of `DISCORD_SHARD_COUNT`."""
    gateway_index: int | None = Field(default=None, validation_alias="DISCORD_GATEWAY_INDEX")
    """This gateway process's number among `DISCORD_GATEWAY_COUNT` (0 first), or a name ending
    in it, like a StatefulSet pod's `chorus-discord-gateway-1`; with `DISCORD_GATEWAY_COUNT` it
    picks this process's block of shards when `DISCORD_SHARD_IDS` is unset."""
    gateway_count: int | None = Field(default=None, ge=1, validation_alias="DISCORD_GATEWAY_COUNT")
    """How many gateway processes share the shards (a StatefulSet's replicas); process `i` of
    `n` connects the `i`-th of `n` equal blocks of shards. Pin `DISCORD_SHARD_COUNT` with it."""
    identify_window: float = Field(
        default=5.0, gt=0, le=60, validation_alias="DISCORD_IDENTIFY_WINDOW"
    )
    """Seconds one identify bucket waits between two IDENTIFYs (Discord's rule: at most
    `max_concurrency` IDENTIFYs per 5 seconds, one per bucket); shared by every gateway process
    through the state store. Lower it only for a loopback test."""

    @field_validator("shard_ids", mode="before")
    @classmethod
    def _parse_shard_ids(cls, value: Any) -> Any:
        if isinstance(value, str):
            return parse_shard_ids(value) or None
        return value

    @field_validator("gateway_index", mode="before")
    @classmethod
    def _index_of_name(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip().isdigit():
            tail = value.strip().rpartition("-")[2]
            if not tail.isdigit():
                raise ValueError(
                    f"{value!r} is neither a number nor a name ending in -NUMBER "
                    "(like a StatefulSet pod's chorus-discord-gateway-1)"
                )
            return int(tail)
        return value

    @model_validator(mode="after")
    def _shards_fit(self) -> DiscordSettings:
        index, count = self.gateway_index, self.gateway_count
        if index is not None and count is not None and index >= count:
            raise ValueError(
                f"DISCORD_GATEWAY_INDEX is {index}, but DISCORD_GATEWAY_COUNT is {count}: "
                f"the index runs from 0 to {count - 1}"
            )
        if self.shard_ids is not None and self.shard_count is not None:
            check_shard_ids(self.shard_ids, self.shard_count, source="DISCORD_SHARD_COUNT")
        return self

    def gateway_pair_problem(self) -> str | None:
        """What is wrong when only one of ``DISCORD_GATEWAY_INDEX``/``_COUNT`` is set."""
        if (self.gateway_index is None) == (self.gateway_count is None):
            return None
        return (
            "DISCORD_GATEWAY_INDEX and DISCORD_GATEWAY_COUNT go together: set both "
            "(this process's number and how many gateway processes share the shards)"
        )

    def shards_of(self, count: int) -> tuple[int, ...]:
        """This process's shards of ``count``: ``DISCORD_SHARD_IDS``, else its block by
        ``DISCORD_GATEWAY_INDEX`` of ``DISCORD_GATEWAY_COUNT``, else every shard."""
        if self.shard_ids:
            return self.shard_ids
        if self.gateway_index is not None and self.gateway_count:
            per = -(-count // self.gateway_count)  # ceil: the last block may be shorter
            return tuple(
                range(self.gateway_index * per, min(count, (self.gateway_index + 1) * per))
            )
        return tuple(range(count))

    @field_validator(
        "allowed_channels", "always_answer_channels", "ambient_channels", mode="before"
    )
    @classmethod
    def _split_channels(cls, value: Any) -> Any:
        if isinstance(value, str):
            return frozenset(int(part) for part in value.replace(" ", "").split(",") if part)
        return value

    @field_validator("api_base_url")
    @classmethod
    def _check_api_base(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")) or not _API_PATH.search(value):
            raise ValueError("must be an http(s) URL ending in the API version, like /api/v10")
        return value

    @field_validator("gateway_url")
    @classmethod
    def _check_gateway(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        value = value.strip()
        if not value.startswith(("ws://", "wss://")):
            raise ValueError("must be a ws:// or wss:// URL")
        return value

    @property
    def configured(self) -> bool:
        """``DISCORD_TOKEN`` is set: the adapter runs."""
        return bool(self.token_value())

    def token_value(self) -> str:
        return self.token.get_secret_value().strip() if self.token is not None else ""

    def secret_values(self) -> list[str]:
        """Values a log formatter must mask."""
        token = self.token_value()
        return [token] if token else []


def parse_shard_ids(text: str) -> tuple[int, ...]:
    """``"0-1"`` -> ``(0, 1)``; ``"3"`` -> ``(3,)``; ``"0-1,4"`` -> ``(0, 1, 4)``; ``""`` -> ``()``.
    In order, without repeats. ``ValueError`` (its message says what is wrong) otherwise."""
    ids: list[int] = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError(
                f"{part!r} is not a shard range: write FIRST-LAST (like 0-1) or one shard id"
            )
        first, last = int(low), int(high) if dash else int(low)
        if last < first:
            raise ValueError(f"{part!r} ends before it starts: write FIRST-LAST with FIRST <= LAST")
        ids += [i for i in range(first, last + 1) if i not in ids]
    return tuple(ids)


def check_shard_ids(ids: tuple[int, ...], count: int, *, source: str) -> None:
    """``ValueError`` naming ``DISCORD_SHARD_IDS`` when a shard id is not below ``count``
    (``source`` says where the count came from)."""
    outside = [i for i in ids if i >= count]
    if outside:
        raise ValueError(
            f"DISCORD_SHARD_IDS names shard {outside[0]}, but there are {count} shards "
            f"({source}): shard ids run from 0 to {count - 1}"
        )
