"""The Toolbox: which tools a channel sees, and running the model's tool calls safely.

Two properties matter to the rest of the bot:

* ``specs_for`` is deterministic: tools sorted by name, and the same list for everybody in a
  channel (a member and a moderator see the same tools; a permission is enforced when the tool
  is *called*). The tool list sits at the start of the cached prompt prefix, so any per-user
  or unordered variation would throw the cache away.
* ``execute`` is total: an unknown or disabled tool, a permission refusal, a ``ToolError``, any
  other exception and a timeout all become an ``is_error`` tool result the model can read and
  react to (the wording is ``prompts/tools/*``). So do ``SystemExit``, ``KeyboardInterrupt``
  and ``GeneratorExit`` out of a tool: they are not ``Exception``s, and asyncio carries the
  first two out of the event loop, so a plugin's ``sys.exit()`` would end the worker. Only
  cancellation propagates. (A ``GeneratorExit`` that closes the caller's coroutine is raised
  again in the caller by Python itself, so containing it here never keeps a closed turn going.)

Enabling is layered: the deployment's enable/disable lists are a ceiling; a channel override
(``CHORUS_TOOLS_CHANNELS``) can narrow it further but never re-enable a tool the deployment
turned off. A scope of ``chorus.toml`` (``ToolContext.tools``) replaces the deployment's lists
for its messages: its operator wrote both.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

from pydantic import BaseModel, ConfigDict, ValidationError

import prompts
from bot.llm.types import ToolCallPart, ToolResultPart, ToolSpec
from bot.settings import ConfigError, ToolSettings
from bot.tools.base import Permission, Tool, ToolContext, ToolError, ToolFilter
from bot.tools.builtin import builtin_tools

log = logging.getLogger("chorus.tools")

DEFAULT_MAX_RESULT_CHARS = 16_000
_DENIED = {Permission.MODERATOR: "tools/denied_moderators", Permission.OWNER: "tools/denied_owner"}


class ChannelToolConfig(BaseModel):
    """Per-channel narrowing of the deployment's tools (``None`` enabled = all of them)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Typed as abstract sets so callers may pass a set; pydantic stores a frozenset.
    enabled: AbstractSet[str] | None = None
    disabled: AbstractSet[str] = frozenset()

    def allows(self, name: str) -> bool:
        return (self.enabled is None or name in self.enabled) and name not in self.disabled


class Toolbox:
    def __init__(
        self,
        tools: Iterable[Tool],
        *,
        enabled: AbstractSet[str] | None = None,
        disabled: AbstractSet[str] = frozenset(),
        channel_overrides: Mapping[str, ChannelToolConfig] | None = None,
        max_result_chars: int = DEFAULT_MAX_RESULT_CHARS,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            name = tool.spec.name
            if name in self._tools:
                raise ValueError(
                    f"two tools are named {name!r}: {self._tools[name]!r} and {tool!r}"
                )
            self._tools[name] = tool
        if max_result_chars < 100:
            raise ValueError("max_result_chars must be at least 100")
        self._deployment = ChannelToolConfig(
            enabled=frozenset(enabled) if enabled is not None else None,
            disabled=frozenset(disabled),
        )
        self._overrides = dict(channel_overrides or {})
        self.max_result_chars = max_result_chars
        self._sorted = tuple(sorted(self._tools))
        self._specs_cache: dict[tuple[str | None, ToolFilter | None], tuple[ToolSpec, ...]] = {}
        self._warn_unknown_names()

    @property
    def names(self) -> tuple[str, ...]:
        """Every registered tool's name, sorted (before any enable/disable)."""
        return self._sorted

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def replace(self, removed: Iterable[str], added: Iterable[Tool]) -> None:
        """Take the tools named ``removed`` out and put ``added`` in (a plugin's reload); a
        name still taken by another tool raises ``ValueError`` and changes nothing."""
        tools = {n: t for n, t in self._tools.items() if n not in set(removed)}
        for tool in added:
            if tool.spec.name in tools:
                raise ValueError(f"a tool named {tool.spec.name!r} exists already")
            tools[tool.spec.name] = tool
        self._tools = tools
        self._sorted = tuple(sorted(tools))
        self._specs_cache.clear()

    def _warn_unknown_names(self) -> None:
        configs = [("deployment", self._deployment), *self._overrides.items()]
        for where, config in configs:
            mentioned = (config.enabled or frozenset()) | config.disabled
            for name in sorted(mentioned - self._tools.keys()):
                log.warning(
                    "tool setting names an unknown tool",
                    extra={"tool": name, "scope": where, "known": ",".join(self._sorted)},
                )

    # -- what a channel sees -------------------------------------------------------------------
    def _available(self, name: str, channel_key: str, scope: ToolFilter | None = None) -> bool:
        override = self._overrides.get(channel_key)
        return (
            name in self._tools
            and (scope or self._deployment).allows(name)
            and (override is None or override.allows(name))
        )

    def specs_for(self, ctx: ToolContext) -> tuple[ToolSpec, ...]:
        """The tools offered in ``ctx``'s channel, sorted by name; the same for every user."""
        key = (ctx.channel_key if ctx.channel_key in self._overrides else None, ctx.tools)
        cached = self._specs_cache.get(key)
        if cached is None:
            cached = tuple(
                self._tools[name].spec
                for name in self._sorted
                if self._available(name, ctx.channel_key, ctx.tools)
            )
            self._specs_cache[key] = cached
        return cached

    # -- running calls ----------------------------------------------------------------------------
    async def execute(self, call: ToolCallPart, ctx: ToolContext) -> ToolResultPart:
        """Run one call; every failure is an ``is_error`` result (only cancellation raises)."""
        started = time.perf_counter()
        content, is_error, outcome = await self._run(call, ctx)
        if len(content) > self.max_result_chars:
            marker = "\n" + prompts.render("tools/truncated", length=len(content))
            content = content[: self.max_result_chars - len(marker)] + marker
        log.info(
            "tool call",
            extra={
                "tool": call.name,
                "outcome": outcome,
                "ms": round((time.perf_counter() - started) * 1000, 1),
                "channel": ctx.channel_key,
                "user_id": ctx.message.author.id,
            },
        )
        return ToolResultPart(call_id=call.id, name=call.name, content=content, is_error=is_error)

    async def _run(self, call: ToolCallPart, ctx: ToolContext) -> tuple[str, bool, str]:
        """``(content, is_error, outcome)`` for one call."""
        name = call.name
        tool = self._tools.get(name)
        if tool is None or not self._available(name, ctx.channel_key, ctx.tools):
            available = ", ".join(s.name for s in self.specs_for(ctx))
            if not available:
                return prompts.render("tools/unknown_none_available", tool=name), True, "unknown"
            return prompts.render("tools/unknown", tool=name, available=available), True, "unknown"
        if not tool.permission.allows(ctx.message.author.roles):
            return prompts.render(_DENIED[tool.permission], tool=name), True, "denied"
        log.debug("tool arguments", extra={"tool": name, "arguments": call.arguments})
        try:
            async with asyncio.timeout(tool.timeout) as deadline:
                text = await tool.call(dict(call.arguments), ctx)
        except ToolError as exc:
            return str(exc) or prompts.render("tools/failed", tool=name), True, "tool_error"
        except TimeoutError as exc:
            if deadline.expired():
                timeout = f"{tool.timeout:g}"
                return prompts.render("tools/timeout", tool=name, seconds=timeout), True, "timeout"
            log.exception("tool raised", extra={"tool": name})
            return _crashed(name, exc), True, "exception"
        except Exception as exc:
            log.exception("tool raised", extra={"tool": name})
            return _crashed(name, exc), True, "exception"
        except asyncio.CancelledError:
            raise
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, GeneratorExit
            log.exception("tool raised a BaseException; contained", extra={"tool": name})
            return _crashed(name, exc), True, "exception"
        if not isinstance(text, str):
            kind = type(text).__name__
            return prompts.render("tools/not_text", tool=name, type=kind), True, "exception"
        return text, False, "ok"

    async def execute_all(
        self, calls: Sequence[ToolCallPart], ctx: ToolContext
    ) -> list[ToolResultPart]:
        """Run several calls concurrently; results come back in the order of ``calls``."""
        if len(calls) == 1:
            return [await self.execute(calls[0], ctx)]
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self.execute(call, ctx)) for call in calls]
        return [task.result() for task in tasks]

    # -- construction from settings ---------------------------------------------------------------
    @classmethod
    def from_settings(cls, settings: ToolSettings, extra_tools: Iterable[Tool] = ()) -> Toolbox:
        """The built-in tools (clock, fetch, and news when feeds are configured) plus ``extra_tools``,
        with the enable/disable lists and channel overrides from ``settings``."""
        return cls(
            [*builtin_tools(settings), *extra_tools],
            enabled=settings.tools_enabled,
            disabled=settings.tools_disabled,
            channel_overrides=channel_overrides(settings),
        )


def _crashed(name: str, exc: BaseException) -> str:
    return prompts.render("tools/crashed", tool=name, error=f"{type(exc).__name__}: {exc}")


def channel_overrides(settings: ToolSettings) -> dict[str, ChannelToolConfig]:
    """Parse the ``CHORUS_TOOLS_CHANNELS`` JSON file (``{}`` when unset)."""
    if settings.tools_channels is None:
        return {}
    path = settings.tools_channels
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"CHORUS_TOOLS_CHANNELS: cannot read {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise ConfigError(f"CHORUS_TOOLS_CHANNELS: {path} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(
            f"CHORUS_TOOLS_CHANNELS: {path} must hold an object like "
            f'{{"discord:123": {{"disabled": ["fetch_page"]}}}}'
        )
    overrides = {}
    for key, value in raw.items():
        if ":" not in key:
            raise ConfigError(f"CHORUS_TOOLS_CHANNELS: {key!r} in {path} is not platform:channel")
        try:
            overrides[key] = ChannelToolConfig.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'value'}: {e['msg']}" for e in exc.errors()
            )
            raise ConfigError(f"CHORUS_TOOLS_CHANNELS: {key!r} in {path}: {problems}") from None
    return overrides
