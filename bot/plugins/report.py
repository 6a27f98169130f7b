"""``chorus plugins list`` and ``chorus plugins info NAME``: what the configuration loads.

The plugins are loaded here as the bot loads them (``CHORUS_PLUGINS``, the config file's
``[plugins] modules``, the entry points when asked for), with their settings checked against
``chorus.toml``, but nothing runs: no store, no platform, no model. ``list`` gives one line per
plugin with where it comes from and what it adds, then each plugin that failed to load with
why; ``info`` adds its version, each tool, command, event handler and timer, and its settings
as this deployment sets them (secrets masked: only whether they are set, and by which variable).
Exit status 1 when a plugin failed to load or its settings are wrong (``info``: when NAME is not
among them), so the command can gate a deploy.
"""

from __future__ import annotations

import logging
from importlib import metadata

from bot.plugins.api import Plugin
from bot.plugins.loader import LoadedPlugins, load_plugins
from bot.settings import ConfigError, Settings


def plugins_command(settings: Settings, action: str, name: str | None = None) -> int:
    quiet = logging.getLogger("chorus.plugins")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)  # the report says it all; the log would say it twice
    try:
        loaded = load_plugins(settings.plugins, file=settings.file, variables=settings.variable)
    except ConfigError as exc:
        print(f"chorus: {exc}")
        return 1
    finally:
        quiet.setLevel(level)
    if action == "info":
        return _info(loaded, name or "")
    for plugin in loaded.plugins:
        print(f"{plugin.name:<24} {_origin(plugin)}")
        print(f"{'':<24} {plugin.describe()}")
    for failed, why in loaded.failed.items():
        print(f"{failed:<24} NOT LOADED: {why}")
    if not loaded.plugins and not loaded.failed:
        print("no plugins (set CHORUS_PLUGINS, [plugins] modules, or CHORUS_PLUGIN_ENTRY_POINTS)")
    return 1 if loaded.failed else 0


def _info(loaded: LoadedPlugins, name: str) -> int:
    plugin = next((p for p in loaded.plugins if p.name == name), None)
    if plugin is None:
        if name in loaded.failed:
            print(f"{name}: NOT LOADED: {loaded.failed[name]}")
        else:
            known = ", ".join(p.name for p in loaded.plugins) or "none"
            print(f"chorus: no plugin named {name!r} is loaded (loaded: {known})")
        return 1
    lines = [
        f"plugin    {plugin.name}",
        f"source    {_origin(plugin)}",
        f"version   {_version(plugin)}",
    ]
    lines += [
        f"tool      {t.spec.name}: {t.spec.description.splitlines()[0]}" for t in plugin.tools
    ]
    lines += [f"command   /{c.name}: {c.summary}" for c in plugin.commands]
    lines += [f"hook      {h.kind}: {h.name}" for h in plugin.hooks]
    lines += [f"event     on_{e.kind}: {e.name}" for e in plugin.events]
    lines += [f"timer     {t.name}: {t.schedule}" for t in plugin.timers]
    config = plugin.services.config
    if config is not None:
        lines.append(f"settings  [plugins.{plugin.name}] ({config.model.__name__})")
        lines += [f"          {key} = {value}" for key, value in config.shown().items()]
    print("\n".join(lines))
    return 0


def _origin(plugin: Plugin) -> str:
    source = plugin.source
    where = getattr(plugin.module, "__file__", None) or "?"
    return f"{source.origin if source else '?'}: {where}"


def _version(plugin: Plugin) -> str:
    module = plugin.module.__name__.split(".")[0] if plugin.module is not None else ""
    for dist in metadata.packages_distributions().get(module, []):
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return "(not an installed distribution)"
