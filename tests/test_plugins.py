"""Plugins in process: what the loader finds and skips, plugin tools in the one toolbox, the
commands' and hooks' containment. ``tests/test_plugins_e2e.py`` runs them in real processes."""

from __future__ import annotations

import asyncio
import logging
import sys
import types
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest

from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.llm.types import ToolCallPart
from bot.plugins import (
    CommandContext,
    Hook,
    Permission,
    Plugin,
    after_reply,
    before_turn,
    command,
    tool,
)
from bot.plugins.loader import ENTRY_POINT_GROUP, Source, load_plugins, plugin_sources
from bot.plugins.runtime import TurnHooks, command_handler
from bot.settings import ConfigError, PluginSettings, settings_from
from bot.tools.base import ToolContext
from bot.tools.toolbox import Toolbox
from tests.plugin_samples import exits, weather

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "plugins" / "chorus_dice"


def message(*roles: Role, text: str = "hi") -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id="m1",
        conversation=ConversationKey(platform="discord", channel="c1"),
        author=Author(id="u1", display_name="Ann", roles=frozenset(roles)),
        text=text,
    )


def settings(*modules: str, entry_points: bool = False) -> PluginSettings:
    return PluginSettings(modules=modules, entry_points=entry_points)


@pytest.fixture
def fake_module() -> Iterator[types.ModuleType]:
    """A plugin module made on the fly and put in ``sys.modules`` as ``fake_plugin``."""
    module = types.ModuleType("fake_plugin")
    sys.modules["fake_plugin"] = module
    yield module
    del sys.modules["fake_plugin"]


# -- settings -------------------------------------------------------------------------------------
def test_chorus_plugins_is_a_comma_list_and_a_bad_name_is_refused() -> None:
    loaded = settings_from({"CHORUS_PLUGINS": "a.b, c:register ,a.b"}).plugins
    assert loaded.modules == ("a.b", "c:register") and not loaded.entry_points  # explicit
    with pytest.raises(ConfigError, match="CHORUS_PLUGINS.*'a-b' is not a module name"):
        settings_from({"CHORUS_PLUGINS": "a-b"})


# -- loading --------------------------------------------------------------------------------------
def test_a_named_module_adds_its_tools_commands_and_hooks() -> None:
    loaded = load_plugins(settings("tests.plugin_samples.weather"))
    assert loaded.failed == {}
    assert sorted(t.spec.name for t in loaded.tools) == ["explode", "forecast", "storm_warning"]
    assert sorted(c.name for c in loaded.commands) == ["boom", "weather"]
    assert [(h.kind, h.name) for h in loaded.hooks] == [
        ("before_turn", "station"),
        ("after_reply", "remember_reply"),
    ]
    (forecast,) = [t for t in loaded.tools if t.spec.name == "forecast"]
    assert forecast.spec.parameters["properties"]["city"]["description"] == "the city's name"


def test_a_plugin_that_fails_is_logged_and_skipped_and_the_rest_load(
    caplog: pytest.LogCaptureFixture,
) -> None:
    names = (
        "tests.plugin_samples.broken",
        "no_such_plugin_anywhere",
        "tests.plugin_samples.weather",
    )
    with caplog.at_level(logging.ERROR, logger="chorus.plugins"):
        loaded = load_plugins(settings(*names))
    assert [p.name for p in loaded.plugins] == ["tests.plugin_samples.weather"]
    assert loaded.failed == {
        "tests.plugin_samples.broken": "RuntimeError: this plugin is broken on purpose",
        "no_such_plugin_anywhere": "ModuleNotFoundError: No module named 'no_such_plugin_anywhere'",
    }
    skipped = [r for r in caplog.records if r.getMessage() == "plugin not loaded, skipped"]
    assert [r.__dict__["plugin"] for r in skipped] == list(names[:2])
    assert "broken on purpose" in skipped[0].__dict__["error"]


def test_a_name_taken_by_a_builtin_or_an_earlier_plugin_skips_the_whole_plugin(
    fake_module: types.ModuleType,
) -> None:
    @tool
    async def forecast(city: str) -> str:
        """Another forecast."""
        return city

    @command
    async def fresh(ctx: CommandContext) -> str:
        """A command of its own."""
        return "x"

    fake_module.forecast = forecast  # type: ignore[attr-defined]
    fake_module.fresh = fresh  # type: ignore[attr-defined]
    loaded = load_plugins(settings("tests.plugin_samples.weather", "fake_plugin"))
    assert loaded.failed == {"fake_plugin": "ValueError: a tool named 'forecast' exists already"}
    assert "fresh" not in [c.name for c in loaded.commands]  # all or nothing
    builtin = load_plugins(settings("tests.plugin_samples.weather"), reserved_tools=["explode"])
    assert builtin.failed == {
        "tests.plugin_samples.weather": "ValueError: a tool named 'explode' exists already"
    }


def test_register_adds_what_a_plugin_builds_at_run_time(fake_module: types.ModuleType) -> None:
    async def greet(ctx: CommandContext) -> str:
        return "hello"

    def register(plugin: Plugin) -> None:
        plugin.add(command(name="greet", summary="Say hello")(greet))
        plugin.add(tool(name="made_later")(weather.forecast.func))

    fake_module.register = register  # type: ignore[attr-defined]
    loaded = load_plugins(settings("fake_plugin"))
    assert [c.name for c in loaded.commands] == ["greet"]
    assert [t.spec.name for t in loaded.tools] == ["made_later"]
    by_function = load_plugins(settings("fake_plugin:register"))
    assert [t.spec.name for t in by_function.tools] == ["made_later"]


def test_an_async_register_or_a_sync_handler_is_refused(fake_module: types.ModuleType) -> None:
    async def register(plugin: Plugin) -> None:
        return None

    fake_module.register = register  # type: ignore[attr-defined]
    loaded = load_plugins(settings("fake_plugin"))
    assert loaded.failed == {
        "fake_plugin": "TypeError: register(plugin) must be a plain function, not async"
    }

    def sync(ctx: CommandContext) -> str:
        return "x"

    with pytest.raises(TypeError, match="must be an `async def`"):
        command(sync)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="1-32 lowercase"):
        command(name="Has Space", summary="x")(weather.weather.handler)


def test_entry_points_are_found_once_and_named_modules_come_first() -> None:
    points = [
        metadata.EntryPoint("weather", "tests.plugin_samples.weather", ENTRY_POINT_GROUP),
        metadata.EntryPoint("dice", "chorus_dice", ENTRY_POINT_GROUP),
    ]
    sources = plugin_sources(
        settings("tests.plugin_samples.weather", entry_points=True), entry_points=lambda: points
    )
    assert [(s.name, s.origin) for s in sources] == [
        ("tests.plugin_samples.weather", "CHORUS_PLUGINS"),
        ("dice", "entry point dice (?), CHORUS_PLUGIN_ENTRY_POINTS"),
    ]


def test_an_entry_point_loads_only_when_named_or_all_are_asked_for(
    caplog: pytest.LogCaptureFixture,
) -> None:
    points = [
        metadata.EntryPoint("weather", "tests.plugin_samples.weather", ENTRY_POINT_GROUP),
        metadata.EntryPoint("dice", "chorus_dice", ENTRY_POINT_GROUP),
    ]
    with caplog.at_level(logging.WARNING, logger="chorus.plugins"):
        off = plugin_sources(settings("x.y"), entry_points=lambda: points)
    assert [s.target for s in off] == ["x.y"]  # CHORUS_PLUGIN_ENTRY_POINTS is off by default
    left_out = [r for r in caplog.records if r.getMessage().startswith("installed plugin not")]
    assert [r.plugin for r in left_out] == ["dice", "weather"]  # type: ignore[attr-defined]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="chorus.plugins"):
        named = plugin_sources(settings("weather", "x.y"), entry_points=lambda: points)
    assert [(s.name, s.target, s.origin) for s in named] == [
        (
            "weather",
            "tests.plugin_samples.weather",
            "entry point weather (?), named in CHORUS_PLUGINS",
        ),
        ("x.y", "x.y", "CHORUS_PLUGINS"),
    ]
    assert [r.plugin for r in caplog.records] == ["dice"]  # type: ignore[attr-defined]


def test_the_example_plugin_loads_from_its_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    loaded = load_plugins(settings(), sources=[Source("dice", "chorus_dice", "test")])
    assert [t.spec.name for t in loaded.tools] == ["roll_dice"]
    assert [c.name for c in loaded.commands] == ["roll"]


# -- tools go through the one toolbox ---------------------------------------------------------------
async def test_a_plugin_tool_that_raises_is_an_error_result_the_model_reads() -> None:
    box = Toolbox(load_plugins(settings("tests.plugin_samples.weather")).tools)
    ctx = ToolContext(message=message())
    result = await box.execute(ToolCallPart(id="1", name="explode", arguments={}), ctx)
    assert result.is_error
    assert result.content == "explode failed: RuntimeError: the weather station is on fire"
    ok = await box.execute(ToolCallPart(id="2", name="forecast", arguments={"city": "Oslo"}), ctx)
    assert (ok.is_error, ok.content) == (False, "Sunny in Oslo, 21 C")


async def test_plugin_tools_obey_permissions_timeouts_and_enabling() -> None:
    tools = load_plugins(settings("tests.plugin_samples.weather")).tools
    box = Toolbox(tools, disabled=frozenset({"forecast"}))
    call = ToolCallPart(id="1", name="storm_warning", arguments={"region": "north"})
    denied = await box.execute(call, ToolContext(message=message()))
    allowed = await box.execute(call, ToolContext(message=message(Role.MODERATOR)))
    assert denied.is_error and "moderators" in denied.content
    assert (allowed.is_error, allowed.content) == (False, "storm warning sent for north")
    assert "forecast" not in [s.name for s in box.specs_for(ToolContext(message=message()))]
    (storm,) = [t for t in tools if t.spec.name == "storm_warning"]
    assert storm.timeout == 3


# -- commands and hooks are contained ---------------------------------------------------------------
async def test_a_command_checks_the_permission_and_contains_errors() -> None:
    @command(permission=Permission.MODERATOR)
    async def kick(ctx: CommandContext) -> str:
        """Kick someone."""
        return f"kicked {ctx.args} for {ctx.user_id} on {ctx.platform}"

    handler = command_handler(kick)
    assert await handler(message(), "bob") == "Only moderators can use /kick."
    assert await handler(message(Role.MODERATOR), "bob") == "kicked bob for u1 on discord"
    failed = await command_handler(weather.boom)(message(), "")
    assert failed == "Sorry, /boom failed. The error is in the bot's log."


async def test_before_turn_hooks_add_context_and_a_failing_one_adds_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    @before_turn
    async def fails(msg: ChatMessage) -> str:
        raise ValueError("nope")

    @before_turn(timeout=0.05)
    async def hangs(msg: ChatMessage) -> str:
        await asyncio.sleep(30)
        return "never"

    hooks = TurnHooks([fails, hangs, weather.station], timeout=5)
    with caplog.at_level(logging.WARNING, logger="chorus.plugins"):
        assert (
            await hooks.before_turn(message(), "<context/>")
            == "<context/>\nWeather station: online"
        )
    assert {r.getMessage() for r in caplog.records} == {
        "plugin hook raised",
        "plugin hook timed out",
    }
    assert await TurnHooks().before_turn(message(), "") == "" and not TurnHooks()


async def test_a_plugin_raising_a_process_exit_is_contained_everywhere() -> None:
    """``SystemExit``, ``KeyboardInterrupt`` and ``GeneratorExit`` out of a plugin's tool,
    command or hook are an error like any other; the worker's loop never sees them."""
    box = Toolbox(load_plugins(settings("tests.plugin_samples.exits")).tools)
    ctx = ToolContext(message=message())
    for name, error in [
        ("shutdown", "SystemExit: 3"),
        ("unplug", "KeyboardInterrupt"),
        ("close_generators", "GeneratorExit"),
    ]:
        result = await box.execute(ToolCallPart(id="1", name=name, arguments={}), ctx)
        assert result.is_error and error in result.content
    failed = "Sorry, /{} failed. The error is in the bot's log."
    assert await command_handler(exits.quit)(message(), "") == failed.format("quit")
    assert await command_handler(exits.interrupt)(message(), "") == failed.format("interrupt")
    hooks = TurnHooks([exits.leave_before, exits.leave_after, weather.station])
    told = message(text=f"{exits.HOOK_EXIT} {exits.AFTER_EXIT}")
    assert await hooks.before_turn(told, "") == "Weather station: online"
    hooks.after_reply(told, "bye")
    await hooks.aclose()


async def test_after_reply_hooks_run_in_the_background_and_close_waits_for_them() -> None:
    seen: list[str] = []
    release = asyncio.Event()

    @after_reply
    async def record(msg: ChatMessage, reply: str) -> None:
        await release.wait()
        seen.append(reply)

    assert isinstance(record, Hook)
    hooks = TurnHooks([record], timeout=5)
    hooks.after_reply(message(), "the answer")
    assert seen == []  # the turn did not wait for it
    release.set()
    await hooks.aclose()
    assert seen == ["the answer"]
