"""MCP over streamable HTTP (``tests/mcp_servers/http_server.py`` on a free loopback port: headers, a refused token, a server that goes down and comes back), the servers file (variables, malformed files, filters) and tool names, specs and results."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import mcp.types as mt
import pytest

from bot.settings import ToolSettings
from bot.tools.base import ToolError
from bot.tools.mcp import MCPManager, ReconnectPolicy, namespaced_name, render_result
from bot.tools.mcp_config import MCPConfigError, load_config, parse_config
from tests.mcp_rig import (
    ECHO,
    ECHO_TOOLS,
    LONG_TOOL,
    FakeTime,
    HttpServer,
    call,
    echo,
    running,
    start_http,
)


@pytest.fixture
async def http_server() -> AsyncIterator[HttpServer]:
    server = await start_http(token="s3cret")
    try:
        yield server
    finally:
        await server.stop()


# -- streamable HTTP ----------------------------------------------------------------------------
@pytest.mark.e2e
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


@pytest.mark.e2e
async def test_http_server_refusing_our_token_is_reported(http_server: HttpServer) -> None:
    servers = {"remote": {"url": http_server.url, "headers": {"Authorization": "Bearer nope"}}}
    async with running(servers) as mgr:
        assert mgr.tools() == []
        assert mgr.status()["remote"].startswith("failed: HTTP 401 Unauthorized")


@pytest.mark.e2e
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
@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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


@pytest.mark.e2e
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
