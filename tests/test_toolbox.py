"""Toolbox: deterministic per-channel specs, and a total ``execute`` (every failure a result)."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path

import pytest

from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.llm.types import ToolCallPart
from bot.settings import ConfigError, load_settings, settings_from
from bot.tools.base import Permission, ToolContext, ToolError
from bot.tools.function import FunctionTool, tool
from bot.tools.toolbox import ChannelToolConfig, Toolbox, channel_overrides


def make_ctx(*roles: Role, channel: str = "c1", platform: str = "discord") -> ToolContext:
    message = ChatMessage(
        platform=platform,
        id="m1",
        conversation=ConversationKey(platform=platform, channel=channel, thread="t9"),
        author=Author(id="u1", display_name="Ann", roles=frozenset(roles)),
        text="hi",
    )
    return ToolContext(message=message)


def call(name: str, call_id: str = "c", **arguments: object) -> ToolCallPart:
    return ToolCallPart(id=call_id, name=name, arguments=arguments)


@tool
async def echo(text: str) -> str:
    """Repeat the text."""
    return text


@tool(permission=Permission.MODERATOR)
async def ban(user_id: str) -> str:
    """Ban a user."""
    return f"banned {user_id}"


@tool(permission=Permission.OWNER)
async def shutdown() -> str:
    """Stop the bot."""
    return "bye"


@tool
async def broken() -> str:
    """Always fails."""
    raise RuntimeError("boom")


@tool
async def refuses() -> str:
    """Fails politely."""
    raise ToolError("the service said no; try another city")


def make_box(**kwargs: object) -> Toolbox:
    return Toolbox([shutdown, echo, broken, ban, refuses], **kwargs)  # type: ignore[arg-type]


def names(box: Toolbox, ctx: ToolContext) -> list[str]:
    return [spec.name for spec in box.specs_for(ctx)]


def test_specs_sorted_and_the_same_for_every_role() -> None:
    box = make_box()
    member, moderator = make_ctx(Role.MEMBER), make_ctx(Role.MODERATOR)
    assert names(box, member) == ["ban", "broken", "echo", "refuses", "shutdown"]
    assert box.specs_for(member) == box.specs_for(moderator)


def test_duplicate_names_are_rejected_naming_both() -> None:
    @tool(name="echo")
    async def other(text: str) -> str:
        """Another echo."""
        return text

    with pytest.raises(ValueError, match=r"two tools are named 'echo'.*FunctionTool\('echo'"):
        Toolbox([echo, other])


def test_deployment_and_channel_enable_disable(caplog: pytest.LogCaptureFixture) -> None:
    box = make_box(
        disabled={"broken"},
        channel_overrides={
            "discord:quiet": ChannelToolConfig(enabled={"echo", "broken"}),
            "discord:nomod": ChannelToolConfig(disabled={"ban", "typo"}),
        },
    )
    assert names(box, make_ctx()) == ["ban", "echo", "refuses", "shutdown"]
    # a channel can narrow but never re-enable what the deployment disabled
    assert names(box, make_ctx(channel="quiet")) == ["echo"]
    assert names(box, make_ctx(channel="nomod")) == ["echo", "refuses", "shutdown"]
    assert names(box, make_ctx(channel="nomod", platform="slack")) == names(box, make_ctx())
    # an unknown name in the settings (a typo) is reported, with where it was found
    unknown = [
        (r.__dict__["tool"], r.__dict__["scope"]) for r in caplog.records if hasattr(r, "scope")
    ]
    assert unknown == [("typo", "discord:nomod")]
    only = make_box(enabled={"echo", "ban"})
    assert names(only, make_ctx()) == ["ban", "echo"]


async def test_unknown_and_channel_disabled_tools_are_error_results() -> None:
    box = make_box(channel_overrides={"discord:c1": ChannelToolConfig(disabled={"echo"})})
    result = await box.execute(call("nope", call_id="x1"), make_ctx())
    assert result.is_error and result.call_id == "x1" and result.name == "nope"
    assert result.content == "unknown tool nope; available: ban, broken, refuses, shutdown"
    hidden = await box.execute(call("echo", text="hi"), make_ctx())
    assert hidden.is_error and hidden.content.startswith("unknown tool echo;")
    elsewhere = await box.execute(call("echo", text="hi"), make_ctx(channel="c2"))
    assert not elsewhere.is_error and elsewhere.content == "hi"


async def test_permissions_are_enforced_at_execution() -> None:
    box = make_box()
    denied = await box.execute(call("ban", user_id="u2"), make_ctx(Role.MEMBER))
    assert denied.is_error and denied.content == "ban may only be used by moderators"
    allowed = await box.execute(call("ban", user_id="u2"), make_ctx(Role.MODERATOR))
    assert not allowed.is_error and allowed.content == "banned u2"
    by_owner = await box.execute(call("ban", user_id="u2"), make_ctx(Role.OWNER))
    assert by_owner.content == "banned u2"
    not_owner = await box.execute(call("shutdown"), make_ctx(Role.MODERATOR))
    assert not_owner.is_error and not_owner.content == "shutdown may only be used by the owner"


async def test_tool_errors_and_exceptions_become_results(caplog: pytest.LogCaptureFixture) -> None:
    box = make_box()
    with caplog.at_level(logging.INFO, logger="chorus.tools"):
        polite = await box.execute(call("refuses"), make_ctx())
        invalid = await box.execute(call("echo", text=["not", "text"]), make_ctx())
        failed = await box.execute(call("broken"), make_ctx())
    assert polite.is_error and polite.content == "the service said no; try another city"
    assert invalid.is_error and invalid.content.startswith("invalid arguments for echo: text:")
    assert failed.is_error and failed.content == "broken failed: RuntimeError: boom"
    raised = [r for r in caplog.records if r.exc_info]
    assert len(raised) == 1 and "boom" in str(raised[0].exc_info[1])  # type: ignore[index]
    outcomes = [getattr(r, "outcome", None) for r in caplog.records if r.msg == "tool call"]
    assert outcomes == ["tool_error", "tool_error", "exception"]


async def test_timeout_becomes_an_error_result() -> None:
    never = asyncio.Event()

    @tool(timeout=0.01)
    async def stuck() -> str:
        """Waits forever."""
        await never.wait()
        return "unreachable"

    result = await Toolbox([stuck]).execute(call("stuck"), make_ctx())
    assert result.is_error and result.content == "stuck timed out after 0.01 s"


async def test_a_tools_own_timeout_error_is_a_failure_not_our_timeout() -> None:
    @tool(timeout=30)
    async def upstream() -> str:
        """Its HTTP client timed out."""
        raise TimeoutError("upstream slow")

    result = await Toolbox([upstream]).execute(call("upstream"), make_ctx())
    assert result.content == "upstream failed: TimeoutError: upstream slow"


async def test_execute_all_runs_calls_concurrently_in_order() -> None:
    ping_started, pong_started = asyncio.Event(), asyncio.Event()

    @tool
    async def ping() -> str:
        """Needs pong to be running at the same time."""
        ping_started.set()
        await pong_started.wait()
        return "ping"

    @tool
    async def pong() -> str:
        """Needs ping to be running at the same time."""
        pong_started.set()
        await ping_started.wait()
        return "pong"

    box = Toolbox([ping, pong, echo])
    calls = [call("pong", "1"), call("echo", "2", text="e"), call("ping", "3"), call("nope", "4")]
    async with asyncio.timeout(10):  # a safety net only: sequential execution would deadlock
        results = await box.execute_all(calls, make_ctx())
    assert [(r.call_id, r.content) for r in results[:3]] == [
        ("1", "pong"),
        ("2", "e"),
        ("3", "ping"),
    ]
    assert results[3].is_error


async def test_results_are_truncated_with_a_marker() -> None:
    box = Toolbox([echo], max_result_chars=200)
    result = await box.execute(call("echo", text="x" * 1000), make_ctx())
    assert len(result.content) == 200
    assert result.content.endswith("[... truncated: result was 1000 characters]")
    assert result.content.startswith("x" * 100)


async def test_arguments_are_logged_only_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    box = make_box()
    with caplog.at_level(logging.INFO, logger="chorus.tools"):
        await box.execute(call("echo", text="hunter2-secret"), make_ctx())
    (record,) = [r for r in caplog.records if r.msg == "tool call"]
    assert (record.tool, record.outcome) == ("echo", "ok")  # type: ignore[attr-defined]
    assert isinstance(record.ms, float)  # type: ignore[attr-defined]
    assert all("hunter2" not in str(vars(r)) for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="chorus.tools"):
        await box.execute(call("echo", text="hunter2-secret"), make_ctx())
    assert any("hunter2" in str(getattr(r, "arguments", "")) for r in caplog.records)


# -- settings ---------------------------------------------------------------------------------
def test_from_settings_defaults_and_feeds(monkeypatch: pytest.MonkeyPatch) -> None:
    box = Toolbox.from_settings(load_settings().tools)
    assert names(box, make_ctx()) == ["current_time", "fetch_page"]  # no feeds: no news tool
    monkeypatch.setenv("CHORUS_FEEDS", "https://example.org/rss, https://example.org/atom")
    monkeypatch.setenv("CHORUS_TOOLS_DISABLED", "current_time")
    monkeypatch.setenv("CHORUS_TOOL_TIMEOUT", "4")
    monkeypatch.setenv("CHORUS_FETCH_TIMEOUT", "7")
    box = Toolbox.from_settings(load_settings().tools, extra_tools=[echo])
    assert names(box, make_ctx()) == ["echo", "fetch_page", "news_headlines"]
    fetch = box.get("fetch_page")
    clock = box.get("current_time")
    assert fetch is not None and fetch.timeout == 12.0
    assert clock is not None and clock.timeout == 4.0


def test_enabled_list_and_channel_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    channels = tmp_path / "channels.json"
    channels.write_text(json.dumps({"discord:c1": {"disabled": ["fetch_page"]}}))
    monkeypatch.setenv("CHORUS_TOOLS_ENABLED", "current_time,fetch_page")
    monkeypatch.setenv("CHORUS_TOOLS_CHANNELS", str(channels))
    box = Toolbox.from_settings(load_settings().tools, extra_tools=[echo])
    assert names(box, make_ctx()) == ["current_time"]
    assert names(box, make_ctx(channel="c2")) == ["current_time", "fetch_page"]


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must hold an object"),
        ('{"c1": {}}', "'c1' in .* is not platform:channel"),
        ('{"discord:1": {"disabled": "fetch_page", "x": 1}}', r"disabled: Input should be"),
    ],
)
def test_invalid_channel_file_names_the_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, content: str, expected: str
) -> None:
    channels = tmp_path / "channels.json"
    channels.write_text(content)
    monkeypatch.setenv("CHORUS_TOOLS_CHANNELS", str(channels))
    with pytest.raises(ConfigError, match=f"CHORUS_TOOLS_CHANNELS: .*{expected}"):
        Toolbox.from_settings(load_settings().tools)


def test_missing_channel_file_and_bad_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHORUS_TOOLS_CHANNELS", "/nonexistent/channels.json")
    with pytest.raises(ConfigError, match="CHORUS_TOOLS_CHANNELS: cannot read"):
        Toolbox.from_settings(load_settings().tools)
    with pytest.raises(ConfigError, match="CHORUS_FETCH_ALLOW=.*: 'a b' is not a host"):
        settings_from({"CHORUS_FETCH_ALLOW": "ok.example, a b"})
    with pytest.raises(ConfigError, match="CHORUS_FEEDS=.*: 'ftp://x' is not an http"):
        settings_from({"CHORUS_FEEDS": "ftp://x"})
    with pytest.raises(ConfigError, match="CHORUS_TOOL_TIMEOUT"):
        settings_from({"CHORUS_TOOL_TIMEOUT": "0"})


def test_settings_parse_comma_lists() -> None:
    settings = settings_from(
        {
            "CHORUS_TOOLS_ENABLED": "",
            "CHORUS_TOOLS_DISABLED": " a , b,",
            "CHORUS_FETCH_ALLOW": "10.0.0.0/8",
            "CHORUS_TOOLS_CHANNELS": "",
        }
    ).tools
    assert channel_overrides(settings) == {}
    assert settings.tools_enabled is None
    assert settings.tools_disabled == {"a", "b"}
    assert settings.fetch_allow == {"10.0.0.0/8"}


def test_function_tool_satisfies_protocol() -> None:
    assert isinstance(echo, FunctionTool)
    assert echo.timeout == 10.0 and echo.permission is Permission.EVERYONE
