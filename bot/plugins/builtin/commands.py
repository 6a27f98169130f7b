"""The ``commands`` built-in plugin: custom chat commands (``!socials``), answered without a model.

Commands come from two places: ``[plugins.commands.commands.NAME]`` in ``chorus.toml`` (per
scope too, like every plugin setting; read-only in chat), and moderators in chat:
``!addcom !name text``, ``!editcom``, ``!delcom`` (kept per channel in ``ctx.store``, so every
worker and every restart sees them); ``!commands`` lists what the channel has. A text may use
``{user}``, ``{touser}``, ``{count}``, ``{uptime}``, ``{random.1-100}`` and ``{channel}``
(``expand``). Each command has a cooldown for the channel and one per user (claimed in the store,
so they hold across workers), a role gate (everyone, subscriber, moderator) and aliases.

The handler is an ``on_message`` one: it sees every line after the safety screen, ambient ones
included, and answers with ``ctx.reply``, so the answer goes the way every reply goes (the
outbound check, the platform's chokepoint with its rate limits and sanitiser) and the model is
never asked. Every sentence it says is ``prompts/plugins/commands/*``.
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

import prompts
from bot.plugins import (
    Bucket,
    EventContext,
    Role,
    on_message,
    on_stream_offline,
    on_stream_online,
    settings,
)
from bot.plugins.builtin import stream
from bot.plugins.builtin.expand import (
    MAX_COOLDOWN,
    NAME,
    BadOption,
    Definition,
    RoleName,
    Variables,
    expand,
    parse_definition,
)

DEFINED = "defined"  # the channel's commands added in chat: name -> definition
PLACES = "places"  # (shared) [platform, channel] of each channel with commands added in chat
MAX_PLACES = 1000
MANAGE = ("addcom", "editcom", "delcom", "commands")
REFUSAL_SECONDS = 30.0  # a viewer's refused !addcom is told once per this many seconds


def text(prompt: str, /, **values: str | int) -> str:
    """The text of ``prompts/plugins/commands/NAME`` (``prompt`` its full name)."""
    return prompts.render(prompt, **values)


class CommandSpec(BaseModel):
    """One command: ``[plugins.commands.commands.NAME]``."""

    model_config = ConfigDict(extra="forbid")

    text: str = Field(min_length=1, max_length=500)
    """What the command answers; may use {user}, {touser}, {count}, {uptime},
    {random.1-100}, {channel}."""
    cooldown: float | None = Field(default=None, ge=0, le=MAX_COOLDOWN)
    """Seconds between two answers in a channel (None: `default_cooldown`)."""
    user_cooldown: float | None = Field(default=None, ge=0, le=MAX_COOLDOWN)
    """Seconds between two answers to the same person (None: `default_user_cooldown`)."""
    role: RoleName = "everyone"
    """Who may use it: everyone, subscriber (and moderators) or moderator."""
    aliases: list[str] = Field(default_factory=list)
    """Other names that run it."""


@settings
class CommandSettings(BaseModel):
    """``[plugins.commands]``."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Answer custom commands here (`false` in a scope turns them off there)."""
    prefix: str = "!"
    """What starts a command: 1-3 characters, never `/`."""
    commands: dict[str, CommandSpec] = Field(default_factory=dict)
    """The commands of the file, by name (without the prefix)."""
    default_cooldown: float = Field(default=30.0, ge=0, le=MAX_COOLDOWN)
    """Seconds between two answers of one command in a channel, unless it sets its own."""
    default_user_cooldown: float = Field(default=0.0, ge=0, le=MAX_COOLDOWN)
    """Seconds between two answers of one command to the same person, unless it sets its own."""
    max_commands: int = Field(default=100, ge=1, le=1000)
    """Commands moderators may add in one channel."""
    max_length: int = Field(default=400, ge=10, le=500)
    """Characters of a command's text added in chat."""

    @field_validator("prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        if not 1 <= len(value) <= 3 or any(c.isspace() for c in value):
            raise ValueError("write 1-3 characters without spaces, like '!'")
        if value.startswith("/"):
            raise ValueError(
                "'/' cannot start custom commands: Twitch keeps /commands for its own chat "
                "and never delivers them to a bot, and Chorus's own commands (/help) use it "
                "everywhere; use '!' (the default) or another character"
            )
        return value

    @field_validator("commands")
    @classmethod
    def _names(cls, value: dict[str, CommandSpec]) -> dict[str, CommandSpec]:
        """Names and aliases: well formed, none managing commands, none naming two commands
        (each problem at its own command's line)."""
        problems: list[InitErrorDetails] = []
        seen: dict[str, str] = {}
        for name, spec in value.items():
            for each in (name, *spec.aliases):
                where: tuple[str, ...] = (name,) if each == name else (name, "aliases")
                if not NAME.fullmatch(each):
                    why = f"command {each!r}: use 1-32 lowercase letters, digits, - or _ "
                    problems.append(_problem(where, why + "(without the prefix)", each))
                elif each in MANAGE:
                    why = f"command {each!r}: that name manages commands"
                    problems.append(_problem(where, why, each))
                elif each in seen:
                    why = f"{each!r} names two commands ({seen[each]} and {name})"
                    problems.append(_problem(where, why, each))
                seen.setdefault(each, name)
        if problems:
            raise ValidationError.from_exception_data(cls.__name__, problems)
        return value


def _problem(where: tuple[str, ...], why: str, value: str) -> InitErrorDetails:
    return InitErrorDetails(type=PydanticCustomError("value_error", why), loc=where, input=value)


def _defined(raw: Any) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in raw.items() if isinstance(v, dict)} if isinstance(raw, dict) else {}


def find(
    config: CommandSettings, defined: dict[str, dict[str, Any]], name: str
) -> tuple[str, CommandSpec, bool] | None:
    """(its name, the command, whether the file defines it) for a name or an alias."""
    for own, spec in config.commands.items():
        if name == own or name in spec.aliases:
            return own, spec, True
    for own, raw in defined.items():
        if name == own or name in raw.get("aliases", ()):
            try:
                return own, CommandSpec.model_validate(raw), False
            except ValueError:
                return None
    return None


def allowed(roles: frozenset[Role], role: RoleName) -> bool:
    """The role gate: whether someone with ``roles`` may use a command for ``role``."""
    if role == "everyone":
        return True
    if role == "subscriber":
        return bool(roles & {Role.SUBSCRIBER, Role.MODERATOR, Role.OWNER})
    return bool(roles & {Role.MODERATOR, Role.OWNER})


async def cooled(
    place: Bucket, name: str, user: str, channel_seconds: float, user_seconds: float
) -> bool:
    """Whether the command may answer now; if so, both its cooldowns start (claimed in the
    store, so every worker agrees). A try refused by one cooldown never starts the other."""
    channel_key, user_key = f"cd:{name}", f"ucd:{name}:{user}"
    if channel_seconds > 0 and await place.get(channel_key) is not None:
        return False
    if user_seconds > 0 and not await place.claim(user_key, user_seconds):
        return False
    if channel_seconds <= 0 or await place.claim(channel_key, channel_seconds):
        return True
    if user_seconds > 0:  # another worker answered it first: this try started nothing
        await place.delete(user_key)
    return False


@on_message
async def answer(ctx: EventContext) -> None:
    """A line starting with the prefix: a custom command, or one that manages them."""
    message = ctx.message
    if message.author.is_bot or not message.text:
        return
    config = ctx.settings(CommandSettings)
    line = message.text.strip()
    if not config.enabled or not line.startswith(config.prefix):
        return
    head, _, args = line[len(config.prefix) :].partition(" ")
    name = head.lower()
    if not name:
        return
    reply = await respond(ctx, config, name, args.strip())
    if reply:
        await ctx.reply(reply)


async def respond(ctx: EventContext, config: CommandSettings, name: str, args: str) -> str | None:
    """What ``name`` with ``args`` answers here (None: nothing)."""
    place = ctx.store.channel
    author = ctx.message.author
    if name in ("addcom", "editcom", "delcom"):
        if not author.is_moderator:
            told = await place.claim(f"refused:{author.id}", REFUSAL_SECONDS)
            return text("plugins/commands/not_allowed") if told else None
        answer = await manage(place, config, name, args)
        await _index(ctx.store.shared, ctx.message.platform, ctx.message.conversation.channel)
        return answer
    defined = _defined(await place.get(DEFINED))
    if name == "commands":
        if not await cooled(place, name, author.id, config.default_cooldown, 0):
            return None
        return listing(config, defined)
    found = find(config, defined, name)
    if found is None:
        return None
    own, spec, _ = found
    if not allowed(author.roles, spec.role):
        return None
    channel_seconds = config.default_cooldown if spec.cooldown is None else spec.cooldown
    user_seconds = (
        config.default_user_cooldown if spec.user_cooldown is None else spec.user_cooldown
    )
    if not await cooled(place, own, author.id, channel_seconds, user_seconds):
        return None
    return await expand(spec.text, _variables(ctx, place, own, args))


def _variables(ctx: EventContext, place: Bucket, name: str, args: str) -> Variables:
    message = ctx.message

    async def count() -> int:
        return await place.incr(f"count:{name}")

    async def uptime() -> str:
        live, since = await stream.live_since(place, message.platform)
        if not live or since is None:
            return text("plugins/commands/offline")
        return stream.duration(time.time() - since)

    live = message.platform in stream.LIVE_PLATFORMS
    channel = message.server if live and message.server else message.conversation.channel
    return Variables(message.author.display_name or message.author.id, args, channel, count, uptime)


def listing(config: CommandSettings, defined: dict[str, dict[str, Any]]) -> str:
    names = sorted({*config.commands, *defined})
    if not names:
        return text("plugins/commands/list_empty")
    return text("plugins/commands/list", commands=", ".join(config.prefix + n for n in names))


async def manage(place: Bucket, config: CommandSettings, verb: str, args: str) -> str:
    """``!addcom``, ``!editcom``, ``!delcom`` (a moderator's)."""
    prefix = config.prefix
    usage = {
        "addcom": "plugins/commands/usage_add",
        "editcom": "plugins/commands/usage_edit",
        "delcom": "plugins/commands/usage_delete",
    }[verb]
    try:
        definition = parse_definition(args, prefix)
    except BadOption as exc:
        return text("plugins/commands/bad_option", option=exc.option)
    if definition is None:
        return text(usage, prefix=prefix)
    name = definition.name
    if not NAME.fullmatch(name):
        return text("plugins/commands/bad_name", prefix=prefix)
    if name in MANAGE:
        return text("plugins/commands/reserved", prefix=prefix, name=name)
    defined = _defined(await place.get(DEFINED))
    found = find(config, defined, name)
    if found is not None and found[2]:
        return text("plugins/commands/from_file", prefix=prefix, name=found[0])
    if verb == "delcom":
        if found is None:
            return text("plugins/commands/unknown", prefix=prefix, name=name)
        del defined[found[0]]
        await _keep(place, defined)
        return text("plugins/commands/deleted", prefix=prefix, name=found[0])
    if verb == "addcom":
        if found is not None:
            return text("plugins/commands/exists", prefix=prefix, name=name)
        if definition.text is None:
            return text(usage, prefix=prefix)
        if len(defined) >= config.max_commands:
            return text("plugins/commands/too_many", count=len(defined))
        current: dict[str, Any] = {}
    else:
        if found is None:
            return text("plugins/commands/unknown", prefix=prefix, name=name)
        if definition.text is None and not definition.options:
            return text(usage, prefix=prefix)
        name = found[0]
        current = dict(defined[name])
    return await _store(place, config, defined, name, current, definition, verb)


async def _store(
    place: Bucket,
    config: CommandSettings,
    defined: dict[str, dict[str, Any]],
    name: str,
    current: dict[str, Any],
    definition: Definition,
    verb: str,
) -> str:
    prefix = config.prefix
    if definition.text is not None:
        if len(definition.text) > config.max_length:
            return text(
                "plugins/commands/too_long", length=len(definition.text), limit=config.max_length
            )
        current["text"] = definition.text
    if definition.aliases is not None:
        for alias in definition.aliases:
            owner = find(config, defined, alias)
            if alias in MANAGE or alias == name or (owner is not None and owner[0] != name):
                return text("plugins/commands/alias_taken", alias=prefix + alias)
        current["aliases"] = definition.aliases
    for key, value in (
        ("cooldown", definition.cooldown),
        ("user_cooldown", definition.user_cooldown),
        ("role", definition.role),
    ):
        if value is not None:
            current[key] = value
    defined[name] = current
    await _keep(place, defined)
    added = "plugins/commands/added" if verb == "addcom" else "plugins/commands/edited"
    return text(added, prefix=prefix, name=name)


async def _index(shared: Bucket, platform: str, channel: str) -> None:
    """Record the channel among those with commands added in chat (the dashboard lists them)."""
    places = await shared.get(PLACES)
    known = [p for p in places if isinstance(p, list)] if isinstance(places, list) else []
    if [platform, channel] not in known:
        await shared.set(PLACES, [*known, [platform, channel]][-MAX_PLACES:])


async def _keep(place: Bucket, defined: dict[str, dict[str, Any]]) -> None:
    if defined:
        await place.set(DEFINED, defined)
    else:
        await place.delete(DEFINED)


@on_stream_online
async def online(ctx: EventContext) -> None:
    """The stream went live: ``{uptime}`` counts from now."""
    await stream.went_online(ctx.store.channel, ctx.message.sent_at, ctx.message.id)


@on_stream_offline
async def offline(ctx: EventContext) -> None:
    await stream.went_offline(ctx.store.channel)
