"""``chorus reload`` for plugins: re-import the ones whose file changed, re-check every plugin's
settings, and keep the running version of any that fails.

A changed plugin is imported afresh into a new module object, from its file, beside the running
one (which keeps serving meanwhile): its objects are collected and checked exactly as at start
(names free, handlers async, its ``[plugins.NAME]`` valid). Only when all of that succeeded does
the new version replace the old in ``sys.modules`` and in the loaded list; the caller then swaps
its tools, commands, hooks, event handlers and timers (``bot/router/plugin_reload.py``). Any
failure, a syntax error, an exception or ``sys.exit()`` at import, a name clash, a bad setting,
leaves the old version in place and is reported with the reason. A plugin whose file did not
change gets its settings re-checked and replaced the same way. Only the plugin's own module
file is watched: a change in another module it imports is not seen.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import CodeType, ModuleType

from bot.ops.logs import add_secrets
from bot.plugins.api import Plugin
from bot.plugins.config import Variables, build_config
from bot.plugins.loader import LoadedPlugins, fingerprint, plugin_from
from bot.settings import FileSettings


@dataclass
class Reloaded:
    """What a reload did, plugin by plugin."""

    swapped: list[tuple[Plugin, Plugin]] = field(default_factory=list)  # (old, new)
    reconfigured: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # plugin -> why it kept its version


def reload_plugins(
    loaded: LoadedPlugins,
    file: FileSettings,
    variables: Variables,
    *,
    reserved_tools: Iterable[str] = (),
    reserved_commands: Iterable[str] = (),
) -> Reloaded:
    """Reload what changed in ``loaded`` (in place); see the module docstring."""
    done = Reloaded()
    for index, old in enumerate(list(loaded.plugins)):
        try:
            new = _changed(loaded, old, reserved_tools, reserved_commands)
            target = new or old
            if target.settings_model is not None:
                config = build_config(target.name, target.settings_model, file, variables)
                add_secrets(config.secret_values())
            else:
                config = None
        except (Exception, SystemExit) as exc:
            done.failed[old.name] = f"{type(exc).__name__}: {exc}"
            continue
        if new is None:
            if config is not None:
                old.services.config = config
                done.reconfigured.append(old.name)
            continue
        new.services.config = config
        new.services.kv, new.services.reach = old.services.kv, old.services.reach
        assert old.module is not None and new.module is not None
        sys.modules[old.module.__name__] = new.module
        loaded.plugins[index] = new
        done.swapped.append((old, new))
    loaded.failed.update(done.failed)
    for _, new in done.swapped:
        loaded.failed.pop(new.name, None)
    return done


def _changed(
    loaded: LoadedPlugins,
    old: Plugin,
    reserved_tools: Iterable[str],
    reserved_commands: Iterable[str],
) -> Plugin | None:
    """The plugin's new version when its file changed (None: it did not); raises why not."""
    module = old.module
    if module is None or old.source is None or fingerprint(module) == old.fingerprint:
        return None
    fresh = _fresh(module)
    others = [p for p in loaded.plugins if p is not old]
    seen = {id(thing) for p in others for thing in (*p.tools, *p.commands, *p.hooks, *p.events)}
    new = plugin_from(old.source, fresh, seen)
    tools = set(reserved_tools) | {t.spec.name for p in others for t in p.tools}
    commands = set(reserved_commands) | {c.name for p in others for c in p.commands}
    for tool in new.tools:
        if tool.spec.name in tools:
            raise ValueError(f"a tool named {tool.spec.name!r} exists already")
    for command in new.commands:
        if command.name in commands:
            raise ValueError(f"a command named /{command.name} exists already")
    return new


class _FromSource(importlib.machinery.SourceFileLoader):
    """Compiles the file as it is now, never from its bytecode cache: the cache is judged
    current by the file's size and its mtime in whole seconds, so an edit of the same size
    within the second of the last import (``version 1`` -> ``version 2``) would run the old
    code."""

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        return self.source_to_code(self.get_data(path), path)


def _fresh(module: ModuleType) -> ModuleType:
    """A new module object executed from ``module``'s file as it is now (``sys.modules``
    untouched)."""
    path = module.__file__
    spec = module.__spec__
    locations = spec.submodule_search_locations if spec is not None else None
    if path is None:
        raise ImportError(f"cannot re-import {module.__name__}: it has no file")
    fresh_spec = importlib.util.spec_from_file_location(
        module.__name__,
        path,
        loader=_FromSource(module.__name__, path),
        submodule_search_locations=locations,
    )
    if fresh_spec is None or fresh_spec.loader is None or path is None:
        raise ImportError(f"cannot re-import {module.__name__} from {path}")
    fresh = importlib.util.module_from_spec(fresh_spec)
    fresh_spec.loader.exec_module(fresh)
    return fresh
