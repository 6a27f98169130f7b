"""Finding and loading plugins: the modules ``CHORUS_PLUGINS`` (or the config file's
``plugins``) names, and installed ``chorus.plugins`` entry points when asked for.

Loading is explicit: a plugin runs inside the bot with its credentials, so having a package
installed (a dependency of a dependency, a stray ``pip install``) must not be enough. An entry
point loads when CHORUS_PLUGIN_ENTRY_POINTS=true (all of them) or when ``CHORUS_PLUGINS`` names
it (its entry-point name, like a module name); every installed one left out is logged at start
with how to load it.

A plugin is all or nothing: if importing it, its ``register``, or checking what it adds fails
(a tool or command name another plugin or a built-in already has, a sync function), the error is
logged with the plugin's name and the plugin is skipped whole; the bot starts with the rest.
Nothing a plugin does at load time can stop the start, short of killing the process.

The plugins shipped with Chorus (``bot/plugins/builtin``: ``BUILTIN``) load the same way, when
``chorus.toml`` has their ``[plugins.NAME]`` table (even an empty one): that table is the
operator's decision to run them.

A module named both in the settings and by an entry point is loaded once. An object found in
two plugins (one plugin importing another's tool) belongs to the first.

A plugin's own settings (its ``@settings`` model, ``[plugins.NAME]``: ``bot/plugins/config.py``)
are the operator's, not the plugin's: like every other key of ``chorus.toml``, a bad one stops
the start with its file and line (one ``ConfigError`` for all of them), and a ``[plugins.NAME]``
table no loaded plugin reads is a warning. Their secrets join the log's masking.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from bot.ops.logs import add_secrets
from bot.plugins.api import Hook, Plugin, PluginCommand
from bot.plugins.api import Source as Source  # re-exported: where tests and callers find it
from bot.plugins.builtin import BUILTIN
from bot.plugins.config import Variables, build_config, is_settings_model
from bot.plugins.events import EventHandler, Subscriber
from bot.plugins.reach import Reach
from bot.plugins.timers import Scheduled, Timer
from bot.settings import ConfigError, FileSettings, PluginSettings
from bot.state.plugin_store import PluginKV
from bot.tools.base import Tool
from bot.tools.function import FunctionTool

log = logging.getLogger("chorus.plugins")

ENTRY_POINT_GROUP = "chorus.plugins"


@dataclass
class LoadedPlugins:
    plugins: list[Plugin] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # plugin -> why it was skipped

    @property
    def tools(self) -> list[Tool]:
        return [tool for plugin in self.plugins for tool in plugin.tools]

    @property
    def commands(self) -> list[PluginCommand]:
        return [command for plugin in self.plugins for command in plugin.commands]

    @property
    def hooks(self) -> list[Hook]:
        return [hook for plugin in self.plugins for hook in plugin.hooks]

    def subscribers(self) -> list[Subscriber]:
        """Each plugin's event handlers, for ``PluginEvents``."""
        return [Subscriber(p.name, p.events, p.services) for p in self.plugins if p.events]

    def scheduled(self) -> list[Scheduled]:
        """Every plugin's timers, for ``PluginTimers``."""
        return [Scheduled(p.name, t, p.services) for p in self.plugins for t in p.timers]

    def bind(self, kv: PluginKV, reach: Reach | None = None) -> None:
        """Give every plugin its store (once the connection exists) and its reach."""
        for plugin in self.plugins:
            plugin.services.kv = kv
            plugin.services.reach = reach


def plugin_sources(
    settings: PluginSettings,
    entry_points: Callable[[], Iterable[metadata.EntryPoint]] | None = None,
    tables: Iterable[str] = (),
) -> list[Source]:
    """The plugins to load, in order: the settings' names (an entry point's name stands for
    its target, a built-in's name for its module), then the built-ins whose ``[plugins.NAME]``
    table is in ``tables``, then every entry point when CHORUS_PLUGIN_ENTRY_POINTS is on."""
    found = sorted(
        entry_points() if entry_points is not None else _group_entry_points(),
        key=lambda p: (p.name, p.value),
    )
    points = {point.name: point for point in reversed(found)}  # the first of a name wins
    sources = []
    for name in settings.modules:
        point = points.get(name)
        if name in BUILTIN:
            sources.append(Source(name, BUILTIN[name], "built-in, named in CHORUS_PLUGINS"))
        elif point is None:
            sources.append(Source(name, name, "CHORUS_PLUGINS"))
        else:
            sources.append(_entry_source(point, "named in CHORUS_PLUGINS"))
    for name in tables:
        if name in BUILTIN:
            sources.append(Source(name, BUILTIN[name], f"built-in, [plugins.{name}]"))
    named = {source.name for source in sources}
    for point in found:
        if settings.entry_points:
            sources.append(_entry_source(point, "CHORUS_PLUGIN_ENTRY_POINTS"))
        elif point.name not in named:
            log.warning(
                "installed plugin not loaded: set CHORUS_PLUGIN_ENTRY_POINTS=true or name it "
                "in CHORUS_PLUGINS",
                extra={"plugin": point.name, "origin": _entry_source(point, "").origin},
            )
    unique: dict[str, Source] = {}
    for source in sources:
        unique.setdefault(source.target.replace(" ", ""), source)
    return list(unique.values())


def _entry_source(point: metadata.EntryPoint, why: str) -> Source:
    dist = getattr(point.dist, "name", None) or "?"
    origin = f"entry point {point.name} ({dist})" + (f", {why}" if why else "")
    return Source(point.name, point.value, origin)


def _group_entry_points() -> Iterable[metadata.EntryPoint]:
    return metadata.entry_points(group=ENTRY_POINT_GROUP)


def load_plugins(
    settings: PluginSettings,
    *,
    reserved_tools: Iterable[str] = (),
    reserved_commands: Iterable[str] = (),
    sources: Iterable[Source] | None = None,
    file: FileSettings | None = None,
    variables: Variables | None = None,
) -> LoadedPlugins:
    """Import every plugin; each that fails is logged and skipped (see the module docstring).
    Their settings come from ``file`` and ``variables`` (none: every plugin's defaults)."""
    loaded = LoadedPlugins()
    tool_names = set(reserved_tools)
    command_names = set(reserved_commands)
    seen: set[int] = set()  # ids of objects an earlier plugin already added
    tables = (file or FileSettings()).plugins
    for source in plugin_sources(settings, tables=tables) if sources is None else sources:
        try:
            plugin = _load(source, seen)
            _check_names(plugin, tool_names, command_names)
        except (Exception, SystemExit) as exc:
            error = f"{type(exc).__name__}: {exc}"
            loaded.failed[source.name] = error
            log.error(
                "plugin not loaded, skipped",
                extra={"plugin": source.name, "origin": source.origin, "error": error},
                exc_info=not isinstance(exc, ModuleNotFoundError | ValueError | TypeError),
            )
            continue
        tool_names.update(t.spec.name for t in plugin.tools)
        command_names.update(c.name for c in plugin.commands)
        seen.update(id(thing) for thing in _things(plugin))
        loaded.plugins.append(plugin)
        log.info(
            "plugin loaded",
            extra={"plugin": source.name, "origin": source.origin, "adds": plugin.describe()},
        )
    configure(loaded.plugins, file or FileSettings(), variables or _no_variables)
    return loaded


def _no_variables(name: str) -> str | None:
    return None


def configure(plugins: Iterable[Plugin], file: FileSettings, variables: Variables) -> None:
    """Each plugin's settings from ``file``; one ``ConfigError`` lists every problem."""
    problems = []
    named = set()
    for plugin in plugins:
        named.add(plugin.name)
        model = plugin.settings_model
        if model is None:
            continue
        try:
            plugin.services.config = config = build_config(plugin.name, model, file, variables)
        except ConfigError as exc:
            problems += str(exc).splitlines()[1:]
            continue
        add_secrets(config.secret_values())
    if problems:
        raise ConfigError("invalid plugin settings:\n" + "\n".join(problems))
    for name in sorted(set(file.plugins) - named):
        log.warning(
            "settings for a plugin that is not loaded are unused",
            extra={"plugin": name, "where": file.where(f"plugins.{name}")},
        )


def _load(source: Source, seen: set[int]) -> Plugin:
    module_name, _, _ = source.target.replace(" ", "").partition(":")
    return plugin_from(source, importlib.import_module(module_name), seen)


def plugin_from(source: Source, module: ModuleType, seen: set[int]) -> Plugin:
    """The plugin ``source`` names, out of its (imported) ``module``."""
    _, _, attribute = source.target.replace(" ", "").partition(":")
    target: Any = module
    for part in attribute.split(".") if attribute else ():
        target = getattr(target, part)
    plugin = Plugin(source.name)
    plugin.source = source
    plugin.module = module
    plugin.fingerprint = fingerprint(module)
    if isinstance(target, ModuleType):
        models = [v for v in vars(target).values() if is_settings_model(v)]
        if len(models) > 1:
            raise TypeError(f"two @settings models: {', '.join(m.__name__ for m in models)}")
        plugin.settings_model = models[0] if models else None
        for value in list(vars(target).values()):
            found = isinstance(value, FunctionTool | PluginCommand | Hook | EventHandler | Timer)
            if found and id(value) not in seen and all(value is not t for t in _things(plugin)):
                plugin.add(value)
        register = getattr(target, "register", None)
        if callable(register):
            _call_register(register, plugin)
    elif callable(target):
        _call_register(target, plugin)
    else:
        raise TypeError(f"{source.target} is neither a module nor a register(plugin) function")
    return plugin


def fingerprint(module: ModuleType) -> str | None:
    """A digest of the module's file (None: it has none), to see whether it changed."""
    path = getattr(module, "__file__", None)
    if not path:
        return None
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def _things(plugin: Plugin) -> list[object]:
    return [*plugin.tools, *plugin.commands, *plugin.hooks, *plugin.events, *plugin.timers]


def _call_register(register: Callable[..., Any], plugin: Plugin) -> None:
    result = register(plugin)
    if hasattr(result, "__await__"):
        close = getattr(result, "close", None)
        if close is not None:
            close()  # never awaited: no "coroutine was never awaited" warning
        raise TypeError("register(plugin) must be a plain function, not async")


def _check_names(plugin: Plugin, tools: set[str], commands: set[str]) -> None:
    for tool in plugin.tools:
        if tool.spec.name in tools:
            raise ValueError(f"a tool named {tool.spec.name!r} exists already")
    for command in plugin.commands:
        if command.name in commands:
            raise ValueError(f"a command named /{command.name} exists already")
