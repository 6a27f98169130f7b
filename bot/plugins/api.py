"""What a plugin module writes: ``@tool``, ``@command``, ``@before_turn``, ``@after_reply``.

A plugin is an ordinary Python module. Decorated objects at its top level are found when it is
loaded (so docs/plugins.md's ``@tool`` example works as it stands), and a module may instead, or as
well, define ``register(plugin)`` to add things it builds at run time (tools made from its own
settings, say). Everything here is plain data plus the author's ``async def``; running it
(time limits, permissions, containing errors) is the loader's, the toolbox's and the hooks'
business, so a plugin never needs to guard itself.

The names a plugin imports are re-exported by ``bot.plugins``: that import path is the stable
one, the modules behind it are not.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Literal, overload

from pydantic import BaseModel

from bot.events import ChatMessage
from bot.plugins.context import MessageContext, PluginServices
from bot.plugins.events import EventHandler
from bot.plugins.timers import Timer
from bot.tools.base import Permission, Tool
from bot.tools.function import parse_docstring

# Discord's rule for a command name (lowercase), which every other platform accepts too.
COMMAND_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
SUMMARY_MAX = 100  # Discord shows at most 100 characters of a command's description
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what all three vendors accept


@dataclass(frozen=True)
class CommandContext(MessageContext):
    """What a command handler gets: the message that ran it, the text after its name, and
    (``services``, filled in by the bot) the plugin's settings and store."""

    message: ChatMessage
    args: str
    services: PluginServices | None = None

    @property
    def user_id(self) -> str:
        """The platform's id of whoever ran the command (never a display name)."""
        return self.message.author.id

    @property
    def platform(self) -> str:
        return self.message.platform


CommandHandler = Callable[[CommandContext], Awaitable[str | None]]
HookKind = Literal["before_turn", "after_reply"]


@dataclass(frozen=True)
class PluginCommand:
    """A ``/name`` chat command: answered without the model, on every platform."""

    name: str
    summary: str
    handler: CommandHandler
    permission: Permission = Permission.EVERYONE
    timeout: float = 10.0

    def __post_init__(self) -> None:
        _require_async(self.handler, f"command /{self.name}")
        if not COMMAND_NAME.fullmatch(self.name):
            raise ValueError(
                f"command name {self.name!r}: use 1-32 lowercase letters, digits, - or _"
            )
        if not self.summary.strip() or len(self.summary) > SUMMARY_MAX:
            raise ValueError(
                f"command /{self.name}: the summary must be 1-{SUMMARY_MAX} characters "
                "(the first line of the docstring, or summary=...)"
            )
        if self.timeout <= 0:
            raise ValueError(f"command /{self.name}: timeout must be positive")


@dataclass(frozen=True)
class Hook:
    """An event hook: ``before_turn(message) -> str | None`` runs before the model is asked
    (text it returns joins the turn's context block); ``after_reply(message, reply)`` runs
    after the answer was sent. ``timeout`` None: ``CHORUS_PLUGIN_HOOK_TIMEOUT``."""

    kind: HookKind
    func: Callable[..., Awaitable[Any]]
    timeout: float | None = None
    name: str = field(default="")

    def __post_init__(self) -> None:
        _require_async(self.func, f"{self.kind} hook")
        if not self.name:
            object.__setattr__(self, "name", getattr(self.func, "__qualname__", repr(self.func)))
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"{self.kind} hook {self.name}: timeout must be positive")


def _require_async(func: Callable[..., Any], what: str) -> None:
    if not inspect.iscoroutinefunction(func):
        raise TypeError(f"{what} must be an `async def` function (Chorus runs on asyncio)")


@overload
def command(func: CommandHandler, /) -> PluginCommand: ...


@overload
def command(
    func: None = None,
    /,
    *,
    name: str | None = None,
    summary: str | None = None,
    permission: Permission = Permission.EVERYONE,
    timeout: float = 10.0,
) -> Callable[[CommandHandler], PluginCommand]: ...


def command(
    func: CommandHandler | None = None,
    /,
    *,
    name: str | None = None,
    summary: str | None = None,
    permission: Permission = Permission.EVERYONE,
    timeout: float = 10.0,
) -> PluginCommand | Callable[[CommandHandler], PluginCommand]:
    """``@command`` or ``@command(name=..., permission=...)`` on ``async def f(ctx)``: the
    command is ``/<function name>`` and its summary the docstring's first paragraph."""

    def wrap(f: CommandHandler) -> PluginCommand:
        described = summary if summary is not None else parse_docstring(inspect.getdoc(f) or "")[0]
        return PluginCommand(
            name=name or str(getattr(f, "__name__", "")),
            summary=described,
            handler=f,
            permission=permission,
            timeout=timeout,
        )

    return wrap(func) if func is not None else wrap


HookFunction = Callable[..., Awaitable[Any]]


@overload
def before_turn(func: HookFunction, /) -> Hook: ...
@overload
def before_turn(*, timeout: float | None = None) -> Callable[[HookFunction], Hook]: ...
def before_turn(
    func: HookFunction | None = None, /, *, timeout: float | None = None
) -> Hook | Callable[[HookFunction], Hook]:
    """``@before_turn`` on ``async def f(message) -> str | None``: runs before the model is
    asked; a string it returns joins the turn's context block."""
    return _hook("before_turn", func, timeout)


@overload
def after_reply(func: HookFunction, /) -> Hook: ...
@overload
def after_reply(*, timeout: float | None = None) -> Callable[[HookFunction], Hook]: ...
def after_reply(
    func: HookFunction | None = None, /, *, timeout: float | None = None
) -> Hook | Callable[[HookFunction], Hook]:
    """``@after_reply`` on ``async def f(message, reply: str) -> None``: runs in the background
    once the model's answer was sent."""
    return _hook("after_reply", func, timeout)


def _hook(
    kind: HookKind, func: HookFunction | None, timeout: float | None
) -> Hook | Callable[[HookFunction], Hook]:
    def wrap(f: HookFunction) -> Hook:
        return Hook(kind, f, timeout)

    return wrap(func) if func is not None else wrap


@dataclass(frozen=True)
class Source:
    """Where one plugin comes from: ``target`` is ``module`` or ``module:attribute``."""

    name: str
    target: str
    origin: str  # "CHORUS_PLUGINS" or "entry point <name> (<distribution>)"


class Plugin:
    """One loaded plugin: what it adds. ``register(plugin)`` receives it to add more."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.tools: list[Tool] = []
        self.commands: list[PluginCommand] = []
        self.hooks: list[Hook] = []
        self.events: list[EventHandler] = []
        self.timers: list[Timer] = []
        self.settings_model: type[BaseModel] | None = None  # its @settings class
        self.services = PluginServices(name)
        # Where it came from, for `chorus reload` and `chorus plugins` (set by the loader):
        self.source: Source | None = None
        self.module: ModuleType | None = None
        self.fingerprint: str | None = None  # a digest of the module's file

    def add(self, thing: Tool | PluginCommand | Hook | EventHandler | Timer) -> None:
        """Add a tool (``@tool`` or any ``Tool``), a command, a hook, an event handler or a
        timer."""
        if isinstance(thing, PluginCommand):
            self.add_command(thing)
        elif isinstance(thing, Hook):
            self.hooks.append(thing)
        elif isinstance(thing, EventHandler):
            self.events.append(thing)
        elif isinstance(thing, Timer):
            if any(t.name == thing.name for t in self.timers):
                raise ValueError(f"two timers named {thing.name!r}")
            self.timers.append(thing)
        else:
            self.add_tool(thing)

    def add_tool(self, tool: Tool) -> None:
        if not isinstance(tool, Tool):
            raise TypeError(f"{tool!r} is not a tool (decorate an async def with @tool)")
        name = tool.spec.name
        if not TOOL_NAME.fullmatch(name):
            raise ValueError(f"tool name {name!r}: use 1-64 letters, digits, - or _")
        if any(t.spec.name == name for t in self.tools):
            raise ValueError(f"two tools named {name!r}")
        self.tools.append(tool)

    def add_command(self, command: PluginCommand) -> None:
        if any(c.name == command.name for c in self.commands):
            raise ValueError(f"two commands named /{command.name}")
        self.commands.append(command)

    def describe(self) -> str:
        tools = ",".join(t.spec.name for t in self.tools) or "-"
        commands = ",".join("/" + c.name for c in self.commands) or "-"
        events = ",".join(sorted({e.kind for e in self.events})) or "-"
        timers = ",".join(t.name for t in self.timers) or "-"
        return (
            f"tools={tools} commands={commands} hooks={len(self.hooks)} events={events} "
            f"timers={timers}"
        )
