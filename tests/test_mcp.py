"""MCP servers as Chorus tools, against real MCP servers written with the official ``mcp`` SDK.

``tests/mcp_servers/echo_server.py`` runs over stdio (launched with ``sys.executable``) and
``http_server.py`` serves the same tools over streamable HTTP on a free loopback port. Nothing
sleeps to wait: the tests await the server's "PORT" line, the calls themselves and the manager's
close; reconnect backoff goes through an injected ``sleep`` and the cooldown through a clock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import mcp.types as mt
import pytest

from bot.events import Author, ChatMessage, ConversationKey
from bot.settings import ToolSettings
from bot.tools.base import Permission, Tool, ToolContext, ToolError
from bot.tools.mcp import MCPManager, MCPTool, ReconnectPolicy, namespaced_name, render_result
from bot.tools.mcp_config import MCPConfigError, load_config, parse_config

SERVERS = Path(__file__).resolve().parent / "mcp_servers"
ECHO = str(SERVERS / "echo_server.py")
HTTP = str(SERVERS / "http_server.py")
LONG_TOOL = "a_tool_with_a_rather_long_name_that_needs_shortening_for_models"
ECHO_TOOLS = sorted(
    [
        "add",
        "crash",
        "fail",
        "getenv",
        "pid",
        "pixel",
        "protocol_error",
        "refuse",
        "shout",
        "slow",
        "stats",
        LONG_TOOL,
    ]
)
WAIT = 60  # upper bound for any single await on a subprocess


def ctx() -> ToolContext:
    message = ChatMessage(
        platform="console",
        id="m1",
        conversation=ConversationKey(platform="console", channel="c1"),
        author=Author(id="u1", display_name="Ann"),
        text="hi",
    )
    return ToolContext(message=message)


def echo(*args: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [ECHO, *args], **extra}


def manager(servers: dict[str, Any], **kwargs: Any) -> MCPManager:
    return MCPManager(parse_config(json.dumps({"mcpServers": servers})), **kwargs)


@asynccontextmanager
async def running(servers: dict[str, Any], **kwargs: Any) -> AsyncIterator[MCPManager]:
    mgr = manager(servers, **kwargs)
    try:
        await asyncio.wait_for(mgr.start(), WAIT)
        yield mgr
    finally:
        await asyncio.wait_for(mgr.aclose(), WAIT)


def by_name(mgr: MCPManager) -> dict[str, Tool]:
    return {t.spec.name: t for t in mgr.tools()}


async def call(mgr: MCPManager, tool: str, /, **arguments: Any) -> str:
    return await asyncio.wait_for(by_name(mgr)[tool].call(arguments, ctx()), WAIT)


def children() -> set[int]:
    """Processes whose parent is this one, zombies included (Linux ``/proc``)."""
    kids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == os.getpid():
                kids.add(int(entry.name))
    return kids


def exists(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


class FakeTime:
    """Records backoff sleeps (returning at once) and serves a clock the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.sleeps: list[float] = []

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def clock(self) -> float:
        return self.now


@dataclass
class HttpServer:
    proc: asyncio.subprocess.Process
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await asyncio.wait_for(self.proc.communicate(), WAIT)


async def start_http(port: int = 0, token: str | None = None) -> HttpServer:
    args = [HTTP, "--port", str(port), *(["--token", token] if token else [])]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), WAIT)
    assert line.startswith(b"PORT "), line
    return HttpServer(proc, int(line.split()[1]))


@pytest.fixture
async def http_server() -> AsyncIterator[HttpServer]:
    server = await start_http(token="s3cret")
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def no_leftover_children() -> Iterator[None]:
    before = children()
    yield
    assert children() <= before, "an MCP server process outlived the manager"


# -- stdio ------------------------------------------------------------------------------------
async def test_stdio_tools_are_namespaced_sorted_and_keep_the_server_schema() -> None:
    async with running({"echo": echo(timeout=12, permission="moderator")}) as mgr:
        tools = mgr.tools()
        assert mgr.status() == {"echo": "connected"}
        assert [t.spec.name for t in tools] == sorted(
            namespaced_name("echo", n) for n in ECHO_TOOLS
        )
        add = by_name(mgr)["echo__add"]
        assert isinstance(add, MCPTool) and isinstance(add, Tool)
        assert add.spec.description == "Add two integers."
        assert add.spec.parameters["required"] == ["a", "b"]
        assert list(add.spec.parameters["properties"]) == ["a", "b"]  # the server's key order
        assert add.spec.parameters["properties"]["a"]["type"] == "integer"
        assert add.permission is Permission.MODERATOR and add.timeout == 12
        assert all(len(t.spec.name) <= 64 for t in tools)


async def test_stdio_calls_return_text_images_and_structured_content() -> None:
    async with running({"echo": echo()}) as mgr:
        assert await call(mgr, "echo__add", a=2, b=3) == "5"
        assert await call(mgr, "echo__shout", text="hi") == "HI!"
        assert await call(mgr, "echo__pixel") == "a pixel\n[image: image/png, 8 bytes]"
        assert await call(mgr, "echo__stats") == '{"count":3,"ok":true}'


async def test_tool_errors_become_tool_errors_and_keep_the_connection() -> None:
    async with running({"echo": echo()}) as mgr:
        pid = await call(mgr, "echo__pid")
        with pytest.raises(ToolError, match="failed on purpose: boom"):
            await call(mgr, "echo__fail")
        with pytest.raises(ToolError, match="Error executing tool crash"):
            await call(mgr, "echo__crash")
        with pytest.raises(ToolError, match="not allowed today"):  # isError from the tool itself
            await call(mgr, "echo__refuse")
        with pytest.raises(ToolError, match="rejected protocol_error: bad request on purpose"):
            await call(mgr, "echo__protocol_error")
        assert await call(mgr, "echo__pid") == pid  # no reconnect for any of those


async def test_a_slow_call_times_out_without_dropping_the_server() -> None:
    async with running({"echo": echo(timeout=0.2)}) as mgr:
        pid = await call(mgr, "echo__pid")
        with pytest.raises(ToolError, match="slow on MCP server echo did not answer within 0.2 s"):
            await call(mgr, "echo__slow", seconds=60)
        assert await call(mgr, "echo__pid") == pid


async def test_servers_that_cannot_start_are_reported_and_skipped(
    caplog: pytest.LogCaptureFixture, no_leftover_children: None
) -> None:
    caplog.set_level(logging.INFO, logger="chorus.mcp")
    servers = {
        "good": echo(),
        "missing": {"command": "/nonexistent/chorus-mcp-server"},
        "quitter": echo("--exit-now"),
        "mute": {"command": sys.executable, "args": ["-c", "import sys; sys.stdin.read()"]},
    }
    servers["mute"]["startTimeout"] = 0.5
    async with running(servers) as mgr:
        assert await call(mgr, "good__add", a=1, b=1) == "2"
        assert {t.spec.name.split("__")[0] for t in mgr.tools()} == {"good"}
        status = mgr.status()
    assert status["good"] == "connected"
    assert status["missing"] == "failed: command not found: /nonexistent/chorus-mcp-server"
    assert status["quitter"].startswith("failed: the server closed the connection")
    assert "stderr: echo_server: exiting on purpose" in status["quitter"]
    assert status["mute"] == "failed: no answer within 0.5 s"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert sorted(r.getMessage().split()[2] for r in errors) == ["missing", "mute", "quitter"]
    assert all("failed to start" in r.getMessage() and r.exc_info is None for r in errors)


async def test_server_stderr_goes_to_a_debug_logger_not_our_stderr(
    caplog: pytest.LogCaptureFixture, capfd: pytest.CaptureFixture[str]
) -> None:
    caplog.set_level(logging.DEBUG, logger="chorus.mcp.server.echo")
    async with running({"echo": echo()}) as mgr:
        await call(mgr, "echo__add", a=1, b=2)
    lines = [r for r in caplog.records if r.name == "chorus.mcp.server.echo"]
    assert any(r.getMessage() == "echo_server: starting" for r in lines)
    assert all(r.levelno == logging.DEBUG for r in lines)
    assert "echo_server: starting" not in capfd.readouterr().err


async def test_killed_stdio_server_is_restarted_and_the_call_retried(
    caplog: pytest.LogCaptureFixture, no_leftover_children: None
) -> None:
    caplog.set_level(logging.INFO, logger="chorus.mcp")
    async with running({"echo": echo()}) as mgr:
        specs = [t.spec for t in mgr.tools()]
        pid = int(await call(mgr, "echo__pid"))
        os.kill(pid, signal.SIGKILL)
        assert await call(mgr, "echo__add", a=20, b=22) == "42"
        assert int(await call(mgr, "echo__pid")) != pid
        assert [t.spec for t in mgr.tools()] == specs  # the cached prefix did not move
        assert mgr.status() == {"echo": "connected"}
    messages = [r.getMessage() for r in caplog.records]
    assert any("MCP server echo dropped during add" in m for m in messages)
    assert messages.count("MCP server echo reconnected") == 1


async def test_concurrent_calls_after_a_crash_share_one_reconnect(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="chorus.mcp")
    async with running({"echo": echo()}) as mgr:
        os.kill(int(await call(mgr, "echo__pid")), signal.SIGKILL)
        results = await asyncio.gather(*(call(mgr, "echo__add", a=i, b=1) for i in range(4)))
        assert results == ["1", "2", "3", "4"]
    assert [r.getMessage() for r in caplog.records].count("MCP server echo reconnected") == 1


async def test_aclose_stops_every_server_process(no_leftover_children: None) -> None:
    mgr = manager({"one": echo(), "two": echo()})
    await asyncio.wait_for(mgr.start(), WAIT)
    pids = {int(await call(mgr, f"{s}__pid")) for s in ("one", "two")}
    assert pids <= children()
    await asyncio.wait_for(mgr.aclose(), WAIT)
    assert not pids & children()
    assert not any(exists(pid) for pid in pids)  # reaped, not zombies
    with pytest.raises(ToolError, match="MCP server one is closed"):
        await call(mgr, "one__add", a=1, b=2)


# -- streamable HTTP ----------------------------------------------------------------------------
async def test_http_server_works_like_stdio_with_headers_from_the_environment(
    http_server: HttpServer,
) -> None:
    servers = {"remote": {"url": http_server.url, "headers": {"Authorization": "Bearer ${TOK}"}}}
    async with running(servers, environ={"TOK": "s3cret"}) as mgr:
        assert [t.spec.name for t in mgr.tools()] == sorted(
            namespaced_name("remote", n) for n in ECHO_TOOLS
        )
        assert await call(mgr, "remote__add", a=2, b=3) == "5"
        with pytest.raises(ToolError, match="failed on purpose"):
            await call(mgr, "remote__fail")
        assert await call(mgr, "remote__stats") == '{"count":3,"ok":true}'


async def test_http_server_refusing_our_token_is_reported(http_server: HttpServer) -> None:
    servers = {"remote": {"url": http_server.url, "headers": {"Authorization": "Bearer nope"}}}
    async with running(servers) as mgr:
        assert mgr.tools() == []
        assert mgr.status()["remote"].startswith("failed: HTTP 401 Unauthorized")


async def test_http_server_down_is_unavailable_then_reconnects(http_server: HttpServer) -> None:
    fake = FakeTime()
    servers = {"remote": {"url": http_server.url, "headers": {"Authorization": "Bearer s3cret"}}}
    policy = ReconnectPolicy(attempts=3, cooldown=30.0)
    async with running(servers, sleep=fake.sleep, clock=fake.clock, policy=policy) as mgr:
        assert await call(mgr, "remote__add", a=1, b=2) == "3"
        await http_server.stop()
        with pytest.raises(ToolError, match=r"MCP server remote is unavailable \(reconnecting\)"):
            await call(mgr, "remote__add", a=1, b=2)
        assert len(fake.sleeps) == 2  # three attempts, jittered backoff between them
        assert 0.25 <= fake.sleeps[0] <= 0.5 and 0.5 <= fake.sleeps[1] <= 1.0
        assert mgr.status()["remote"].startswith("unavailable: cannot reach")
        with pytest.raises(ToolError, match="unavailable"):  # cooling down: fails fast
            await call(mgr, "remote__add", a=1, b=2)
        assert len(fake.sleeps) == 2

        revived = await start_http(port=http_server.port, token="s3cret")
        try:
            fake.now += 31
            assert await call(mgr, "remote__add", a=4, b=5) == "9"
            assert mgr.status()["remote"] == "connected"
        finally:
            await revived.stop()


# -- config ----------------------------------------------------------------------------------
async def test_env_and_args_are_expanded_and_reach_the_server(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MCP_TEST_SECRET", "do not pass on")
    servers = {
        "echo": {
            "command": sys.executable,
            "args": ["${SCRIPT}"],
            "env": {"GREETING": "hello ${WHO}", "FALLBACK": "${NOPE:-plan b}"},
        }
    }
    async with running(servers, environ={"SCRIPT": ECHO, "WHO": "world"}) as mgr:
        assert await call(mgr, "echo__getenv", name="GREETING") == "hello world"
        assert await call(mgr, "echo__getenv", name="FALLBACK") == "plan b"
        # only the configured env (and PATH, HOME...) reaches a server, never our secrets
        assert await call(mgr, "echo__getenv", name="MCP_TEST_SECRET") == '{"result":""}'


def test_a_missing_variable_names_the_server_the_field_and_the_variable() -> None:
    config = parse_config(
        json.dumps({"mcpServers": {"r": {"url": "http://h/mcp", "headers": {"X": "${TOKEN}"}}}})
    )
    with pytest.raises(
        MCPConfigError, match=r"MCP server 'r': headers.X uses \$\{TOKEN\}, but TOKEN is not set"
    ):
        config.servers["r"].expanded("r", {})


async def test_a_server_with_a_missing_variable_is_skipped_not_fatal() -> None:
    async with running({"good": echo(), "bad": echo(env={"K": "${MISSING}"})}) as mgr:
        assert mgr.status()["good"] == "connected"
        assert "MISSING is not set" in mgr.status()["bad"]
        assert await call(mgr, "good__add", a=1, b=1) == "2"


def test_malformed_files_name_the_file_and_the_json_path(tmp_path: Path) -> None:
    bad = tmp_path / "mcp.json"
    bad.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "files": {"command": "x", "args": ["ok", 7]},
                    "both": {"command": "x", "url": "http://h/mcp"},
                    "odd name": {"command": "x", "permission": "admin", "tools": {"alow": []}},
                    "old": {"url": "http://h/sse", "type": "sse"},
                }
            }
        )
    )
    with pytest.raises(MCPConfigError) as info:
        load_config(bad)
    message = str(info.value)
    assert message.startswith(f"MCP config {bad} is invalid:")
    assert "mcpServers.files.args[1]: Input should be a valid string" in message
    assert "mcpServers.both: give either command (stdio) or url (streamable HTTP)" in message
    assert 'mcpServers["odd name"].permission' in message
    assert 'mcpServers["odd name"].tools.alow' in message
    assert "mcpServers.old: the legacy SSE transport is not supported" in message

    bad.write_text('{"mcpServers": {"a": {"command": "x",}}}')
    with pytest.raises(MCPConfigError, match=rf"MCP config {bad}: invalid JSON at line 1 column"):
        load_config(bad)
    bad.write_text('{"servers": {}}')
    with pytest.raises(MCPConfigError, match='expected a JSON object with an "mcpServers" key'):
        load_config(bad)
    with pytest.raises(MCPConfigError, match="does not exist"):
        load_config(tmp_path / "nope.json")


def test_from_settings_reads_chorus_mcp_config(tmp_path: Path) -> None:
    path = tmp_path / "servers.json"
    path.write_text(
        json.dumps({"mcpServers": {"a": {"command": "x"}, "b": {"url": "http://h/mcp"}}})
    )
    mgr = MCPManager.from_settings(ToolSettings.model_validate({"CHORUS_MCP_CONFIG": str(path)}))
    assert mgr is not None and sorted(mgr.status()) == ["a", "b"]
    assert MCPManager.from_settings(ToolSettings()) is None


async def test_disabled_servers_are_not_started_and_filters_pick_tools() -> None:
    servers = {
        "echo": echo(tools={"allow": ["a*", "s*"], "deny": ["stats", "slow"]}),
        "off": echo(enabled=False),
    }
    async with running(servers) as mgr:
        assert mgr.status() == {"echo": "connected"}
        assert [t.spec.name for t in mgr.tools()] == sorted(
            namespaced_name("echo", n) for n in ("add", "shout", LONG_TOOL)
        )


# -- names, specs and results -------------------------------------------------------------------
def test_names_are_sanitised_and_long_ones_shortened_deterministically() -> None:
    assert namespaced_name("my files", "read.file") == "my_files__read_file"
    long_name = namespaced_name("echo", LONG_TOOL)
    assert len(long_name) == 64
    assert long_name == namespaced_name("echo", LONG_TOOL)
    assert long_name.startswith("echo__a_tool_with_a_rather_long")
    assert long_name != namespaced_name("echo", LONG_TOOL + "2")
    assert namespaced_name("echo", "x" * 58) == "echo__" + "x" * 58  # exactly 64: kept


async def test_names_that_sanitise_alike_stay_distinct_and_specs_are_stable() -> None:
    servers = {"a.b": echo(tools={"allow": ["add"]}), "a_b": echo(tools={"allow": ["add"]})}
    async with running(servers) as first:
        names = [t.spec.name for t in first.tools()]
        dumped = [t.spec.model_dump_json() for t in first.tools()]
    assert len(set(names)) == 2 and all(n.startswith("a_b__add_") for n in names)
    async with running(servers) as second:
        assert [t.spec.model_dump_json() for t in second.tools()] == dumped


def test_render_result_summarises_non_text_content() -> None:
    result = mt.CallToolResult(
        content=[
            mt.AudioContent(data="AAAA", mime_type="audio/wav"),
            mt.ResourceLink(name="notes", uri="file:///notes.txt"),
            mt.EmbeddedResource(
                resource=mt.TextResourceContents(uri="file:///a.txt", text="alpha")
            ),
            mt.EmbeddedResource(
                resource=mt.BlobResourceContents(uri="file:///b.bin", blob="AAECAw==")
            ),
        ]
    )
    assert render_result(result) == (
        "[audio: audio/wav, 3 bytes]\n[resource link: notes file:///notes.txt]\n"
        "[resource: file:///a.txt]\nalpha\n"
        "[resource: file:///b.bin, application/octet-stream, 4 bytes]"
    )
    assert render_result(mt.CallToolResult(content=[])) == "(no output)"
    with_text = mt.CallToolResult(content=[mt.TextContent(text="7")], structured_content={"n": 7})
    assert render_result(with_text) == "7"
    with pytest.raises(ToolError, match="without details"):
        render_result(mt.CallToolResult(content=[], is_error=True))
