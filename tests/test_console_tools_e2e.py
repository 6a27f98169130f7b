"""``please call tool <name>`` in the console drives a real tool call end to end: the chorus
process, the vendor SDK, a loopback server playing a model that asks for the tool, the Toolbox
and the built-in tool itself."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.agent_rig import VENDORS, tool_results
from tests.test_chat_e2e import VENDORS as CHAT_VENDORS
from tests.test_chat_e2e import base_env, run_chorus

ASK = re.compile(r"please call tool ([a-z_]+)(?: with (\{.*?\}))?")


def tool_playing_model(vendor: str) -> Callable[[dict[str, Any]], Any]:
    """A scripted 'model': asks for the tool the user named, then reports what it returned."""

    def reply(body: dict[str, Any]) -> Any:
        results = tool_results(vendor, body)
        if results:
            _, text, is_error = results[-1]
            return f"{'Tool failed' if is_error else 'Tool said'}: {text}"
        match = ASK.search(json.dumps(body).replace('\\"', '"'))
        if not match:
            return "no tool requested"
        args = json.loads(match.group(2)) if match.group(2) else {}
        return {"tool_calls": [{"id": "call_1", "name": match.group(1), "arguments": args}]}

    return reply


@pytest.mark.parametrize("vendor", VENDORS)
async def test_console_drives_a_real_tool_call(vendor: str, tmp_path: Path) -> None:
    server_cls, model, key_env, url_env = CHAT_VENDORS[vendor]
    async with server_cls() as server:
        server.default_reply = tool_playing_model(vendor)
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": model,
            key_env: "k-test",
            url_env: server.base_url,
        }
        before = datetime.now(UTC)
        code, out, err = await run_chorus(
            ["chat"],
            env,
            tmp_path,
            b'please call tool current_time with {"timezone": "Asia/Tokyo"}\n',
        )
        assert code == 0, err
        assert out.startswith("Tool said: "), out
        tokyo = {(before + timedelta(hours=9, minutes=m)).strftime("%Y-%m-%d") for m in (0, 5)}
        assert any(day in out for day in tokyo) and "+09:00" in out
        assert len(server.requests) == 2  # asked for the tool, then answered with its result


async def test_fetch_tool_refuses_the_host_network_end_to_end(tmp_path: Path) -> None:
    server_cls, model, key_env, url_env = CHAT_VENDORS["anthropic"]
    async with server_cls() as server:
        server.default_reply = tool_playing_model("anthropic")
        env = base_env(tmp_path) | {"CHORUS_MODEL": model, key_env: "k", url_env: server.base_url}
        line = (
            'please call tool fetch_page with {"url": "http://169.254.169.254/latest/meta-data"}\n'
        )
        code, out, err = await run_chorus(["chat"], env, tmp_path, line.encode())
        assert code == 0, err
        assert out.startswith("Tool failed: ") and "169.254.169.254" in out and "refused" in out


async def test_console_calls_a_tool_of_an_mcp_server(tmp_path: Path) -> None:
    """A stdio MCP server written with the ``mcp`` package is discovered at start and its tool
    is called inside the loop, all from ``chorus chat``."""
    import sys

    server_script = Path(__file__).parent / "mcp_servers" / "echo_server.py"
    config = tmp_path / "mcp.json"
    config.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "echo": {"command": sys.executable, "args": [str(server_script)]},
                    "broken": {"command": "/nonexistent/mcp-server"},
                }
            }
        )
    )
    server_cls, model, key_env, url_env = CHAT_VENDORS["openai"]
    async with server_cls() as server:
        server.default_reply = tool_playing_model("openai")
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": model,
            key_env: "k",
            url_env: server.base_url,
            "CHORUS_MCP_CONFIG": str(config),
        }
        code, out, err = await run_chorus(
            ["chat"], env, tmp_path, b'please call tool echo__add with {"a": 2, "b": 40}\n'
        )
        assert code == 0, err
        assert out.strip() == "Tool said: 42"
        tools = [t["function"]["name"] for t in server.bodies[0]["tools"]]
        assert "echo__add" in tools and "current_time" in tools
        assert "broken" in err  # the server that failed to start is reported, not fatal
