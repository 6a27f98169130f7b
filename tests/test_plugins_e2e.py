"""Plugins in real processes: the example plugin installed with pip (found by its entry point,
loaded with CHORUS_PLUGIN_ENTRY_POINTS=true or by its name in ``CHORUS_PLUGINS``, and not at all
otherwise) and a plugin named in ``CHORUS_PLUGINS`` each add a tool the model calls and a
``/command`` users run, in ``chorus chat`` (piped) and in ``chorus run`` on Discord (loopback
gateway), where the commands are native slash commands too. Plugins that cannot load are logged
and skipped; a plugin whose tool, command or hooks raise ``SystemExit`` (or
``KeyboardInterrupt``, ``GeneratorExit``) does not end ``chorus run``."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.agent_rig import tool_results
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    load_fixture,
    plain_message,
)
from tests.loopback.openai_server import OpenAIServer
from tests.plugin_samples import exits
from tests.test_chat_e2e import ROOT, base_env, run_chorus, spawn_chorus

EXAMPLE = ROOT / "examples" / "plugins" / "chorus_dice"
ASK = re.compile(r"please call tool ([a-z_]+)(?: with (\{.*?\}))?")
PLUGINS = "tests.plugin_samples.weather,tests.plugin_samples.broken,no_such_plugin"
ROLLED = re.compile(r"2d6\+1: ([1-6]) \+ ([1-6]) \+ 1 = (\d+)")


@pytest.fixture(scope="module")
def dice_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install`` of examples/plugins/chorus_dice into a directory of its own (offline,
    from a copy so the build leaves nothing in the repository); the child processes get it on
    ``PYTHONPATH``, where ``importlib.metadata`` finds its entry point. The shared venv is left
    untouched."""
    base = tmp_path_factory.mktemp("dice")
    source, site = base / "src", base / "site"
    shutil.copytree(EXAMPLE, source)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
        + ["--no-build-isolation", "--disable-pip-version-check", "--target", str(site)]
        + [str(source)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (points,) = site.glob("chorus_plugin_dice-*.dist-info/entry_points.txt")
    assert "[chorus.plugins]\ndice = chorus_dice" in points.read_text()
    return site


def playing_model(body: dict[str, Any]) -> Any:
    """Asks for the tool the newest message names, then reports what the tool returned."""
    results = tool_results("openai", body)
    if results:
        _, text, is_error = results[-1]
        return f"{'Tool failed' if is_error else 'Tool said'}: {text}"
    asked = ASK.findall(json.dumps(body).replace('\\"', '"'))
    if not asked:
        return "no tool requested"
    name, args = asked[-1]
    return {"tool_calls": [{"id": "call_1", "name": name, "arguments": json.loads(args or "{}")}]}


def plugin_env(tmp_path: Path, model: OpenAIServer, site: Path) -> dict[str, str]:
    return base_env(tmp_path) | {
        "CHORUS_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "k",
        "OPENAI_BASE_URL": model.base_url,
        "PYTHONPATH": f"{ROOT}{os.pathsep}{site}",
        "CHORUS_PLUGINS": PLUGINS,
        "CHORUS_INSIGHTS_ENABLED": "false",
        "WEATHER_PLUGIN_LOG": str(tmp_path / "replies.log"),
    }


def check_dice(answer: str, count: int) -> None:
    result = json.loads(answer.removeprefix("Tool said: "))
    assert len(result["rolls"]) == count and all(1 <= r <= 6 for r in result["rolls"])
    assert result["total"] == sum(result["rolls"])


def check_skipped(err: str) -> None:
    for name in ("tests.plugin_samples.broken", "no_such_plugin"):
        assert re.search(rf"plugin not loaded, skipped.*plugin={re.escape(name)}", err), err
    assert "this plugin is broken on purpose" in err
    assert re.search(r"plugin loaded.*plugin=dice.*chorus-plugin-dice", err), err
    assert re.search(r"plugin loaded.*plugin=tests.plugin_samples.weather", err), err


async def test_plugins_on_the_console(tmp_path: Path, dice_site: Path) -> None:
    async with OpenAIServer() as model:
        model.default_reply = playing_model
        lines = [
            'please call tool roll_dice with {"dice": "3d6"}',
            "/roll 2d6+1",
            'please call tool forecast with {"city": "Lisbon"}',
            "/weather Porto",
            "please call tool explode",
            "/boom",
            "/help",
        ]
        stdin = ("\n".join(lines) + "\n").encode()
        env = plugin_env(tmp_path, model, dice_site) | {"CHORUS_PLUGIN_ENTRY_POINTS": "true"}
        code, out, err = await run_chorus(["chat"], env, tmp_path, stdin)
    assert code == 0, err[-3000:]
    answers = out.splitlines()
    assert len(answers) == len(lines), out
    check_dice(answers[0], 3)
    rolled = ROLLED.fullmatch(answers[1])
    assert rolled and int(rolled[3]) == int(rolled[1]) + int(rolled[2]) + 1, answers[1]
    assert answers[2] == "Tool said: Sunny in Lisbon, 21 C"
    assert answers[3] == "Weather for Porto: sunny"
    assert answers[4].endswith("explode failed: RuntimeError: the weather station is on fire")
    assert answers[4].startswith("Tool failed: ")  # an error result the model read
    assert answers[5] == "Sorry, /boom failed. The error is in the bot's log."
    assert "/roll - Roll dice, e.g. /roll 2d6" in answers[6]
    assert "/weather - Today's weather, e.g. /weather Porto" in answers[6]
    tools = {t["function"]["name"] for t in model.bodies[0]["tools"]}
    assert {"roll_dice", "forecast", "explode", "storm_warning", "current_time"} <= tools
    assert all("Weather station: online" in json.dumps(b["messages"]) for b in model.bodies)
    check_skipped(err)
    replies = (tmp_path / "replies.log").read_text().splitlines()  # after_reply, in process
    assert replies[1:] == [
        f"console:{_user(replies[1])}: Tool said: Sunny in Lisbon, 21 C",
        f"console:{_user(replies[1])}: {answers[4]}",
    ]


def _user(line: str) -> str:
    return line.split(":")[1]


def _interaction(interaction_id: str, name: str, text: str | None) -> dict[str, Any]:
    human = load_fixture("discord_message_create_docs_example")["d"]["author"]
    options = [] if text is None else [{"name": "text", "type": 3, "value": text}]
    return {
        "id": interaction_id,
        "application_id": str(BOT_ID),
        "type": 2,
        "token": f"token-{interaction_id}",
        "version": 1,
        "channel_id": str(CHANNEL_ID),
        "channel": {"id": str(CHANNEL_ID), "type": 1},
        "user": human,
        "data": {"id": "7", "name": name, "type": 1, "options": options},
        "locale": "en-US",
        "app_permissions": "0",
        "entitlements": [],
        "attachment_size_limit": 10485760,
    }


async def test_plugins_on_discord(tmp_path: Path, dice_site: Path) -> None:
    async with OpenAIServer() as model, DiscordServer() as discord:
        model.default_reply = playing_model
        env = plugin_env(tmp_path, model, dice_site) | {
            "CHORUS_PLUGINS": f"{PLUGINS},dice",  # the entry point by its name
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        posts = f"/channels/{CHANNEL_ID}/messages"

        async def say(message_id: int, text: str, count: int) -> str:
            content = f"<@{BOT_ID}> {text}"
            event = plain_message(message_id, content, mentions=[bot_mention()])
            await discord.dispatch("MESSAGE_CREATE", event)
            await discord.wait_for(lambda: len(discord.requests_to("POST", posts)) >= count, 90)
            return str(discord.requests_to("POST", posts)[count - 1].body["content"])

        async def slash(interaction_id: str, name: str, text: str | None) -> str:
            await discord.dispatch("INTERACTION_CREATE", _interaction(interaction_id, name, text))
            path = f"/webhooks/{BOT_ID}/token-{interaction_id}"
            (followup,) = await discord.wait_request("POST", path)
            return str(followup.body["content"])

        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)  # IDENTIFY
            (sync,) = await discord.wait_request("PUT", f"/applications/{BOT_ID}/commands")
            dice = await say(5001, 'please call tool roll_dice with {"dice": "2d6"}', 1)
            typed = await say(5002, "/weather Porto", 2)
            told = await say(5003, 'please call tool forecast with {"city": "Oslo"}', 3)
            rolled = await slash("6001", "roll", "2d6+1")
            weather = await slash("6002", "weather", None)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
    err = err_bytes.decode()
    assert proc.returncode == 0, err[-3000:]
    commands = {c["name"]: c for c in sync.body}
    assert {"chorus", "roll", "weather", "boom"} <= set(commands)
    assert commands["roll"]["description"] == "Roll dice, e.g. /roll 2d6"
    (option,) = commands["roll"]["options"]
    assert (option["name"], option["type"], option.get("required", False)) == ("text", 3, False)
    check_dice(dice, 2)
    assert typed == "Weather for Porto: sunny"
    assert told == "Tool said: Sunny in Oslo, 21 C"
    assert ROLLED.fullmatch(rolled), rolled
    assert weather == "Weather for here: sunny"
    check_skipped(err)


async def test_an_installed_plugin_loads_only_when_asked_for(
    tmp_path: Path, dice_site: Path
) -> None:
    async with OpenAIServer() as model:
        model.default_reply = playing_model
        env = plugin_env(tmp_path, model, dice_site)
        code, out, err = await run_chorus(["chat"], env, tmp_path, b"/roll 2d6\n")
    assert code == 0, err[-3000:]
    assert not ROLLED.search(out) and "roll_dice" not in json.dumps(model.bodies)
    assert not re.search(r"plugin loaded.*plugin=dice", err), err
    assert re.search(
        r"installed plugin not loaded: set CHORUS_PLUGIN_ENTRY_POINTS=true or name it in "
        r"CHORUS_PLUGINS.*plugin=dice.*chorus-plugin-dice",
        err,
    ), err


def newest_message_model(body: dict[str, Any]) -> Any:
    """``playing_model`` reading only the newest message, so history never asks again."""
    newest = body["messages"][-1]
    return playing_model(body | {"messages": [newest]})


async def test_a_plugin_that_exits_does_not_end_the_worker(tmp_path: Path) -> None:
    lines = [
        "please call tool shutdown",
        "please call tool unplug",
        "please call tool close_generators",
        "/quit",
        "/interrupt",
        f"{exits.HOOK_EXIT}, hello",
        f"{exits.AFTER_EXIT}, please",
        "still there?",
    ]
    async with OpenAIServer() as model:
        model.default_reply = newest_message_model
        env = plugin_env(tmp_path, model, tmp_path) | {
            "CHORUS_PLUGINS": "tests.plugin_samples.exits"
        }
        stdin = ("\n".join(lines) + "\n").encode()
        code, out, err = await run_chorus(["run"], env, tmp_path, stdin)
    assert code == 0, err[-3000:]
    answers = out.splitlines()
    assert len(answers) == len(lines), (out, err[-3000:])
    for answer, error in zip(
        answers, ["SystemExit: 3", "KeyboardInterrupt", "GeneratorExit"], strict=False
    ):
        assert answer.startswith("Tool failed: ") and error in answer, answer
    assert answers[3:5] == [
        "Sorry, /quit failed. The error is in the bot's log.",
        "Sorry, /interrupt failed. The error is in the bot's log.",
    ]
    assert answers[5:] == ["no tool requested"] * 3
    for contained in (
        r"tool raised a BaseException; contained.*tool=shutdown",
        r"plugin command raised a BaseException; contained.*command=quit",
        r"plugin hook raised a BaseException; contained.*hook=leave_before",
        r"plugin hook raised a BaseException; contained.*hook=leave_after",
    ):
        assert re.search(contained, err), (contained, err[-3000:])
