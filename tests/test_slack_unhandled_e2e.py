"""Every well-signed Slack event gets a 200, handled or not: ``chorus run`` as a real process on
the HTTP Events API (signed like Slack signs), slack-sdk against the loopback Web API.

- Event types Chorus does not handle (``tests/fixtures/slack/slack_events_unhandled.json``) are
  acknowledged (bolt alone answers them 404, which Slack retries and counts towards disabling
  the app's subscriptions) and counted by type in ``/metrics``; a retry of one is dropped by
  the ``event_id`` dedupe and not counted twice.
- Slack's top-level ``app_rate_limited`` callback is acknowledged, logged and counted.
- What held holds: a badly signed request is refused with 401, and a mention is still answered.

And, without a process, the label an unhandled request is counted under stays a short name.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path
from typing import Any

import aiohttp

from adapters.slack.unhandled import kind_of
from tests.loopback.openai_server import OpenAIServer
from tests.loopback.slack_server import SlackServer
from tests.redis_server import free_port
from tests.slack_rig import BOT_TOKEN, SECRET, fixture, mention, post_signed
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus

LIMIT = 90.0


async def _post(url: str, body: dict[str, Any], **options: Any) -> int:
    status, _ = await post_signed(url, json.dumps(body).encode(), **options)
    return status


async def _until_listening(url: str, proc: asyncio.subprocess.Process) -> None:
    async with asyncio.timeout(LIMIT):
        while True:
            assert proc.returncode is None, "chorus run exited at start"
            try:
                await post_signed(url, b"{}", secret=None)  # refused (401): counts nothing
                return
            except aiohttp.ClientConnectionError:
                await asyncio.sleep(0.2)


async def _metrics(health: str) -> dict[str, float]:
    """``name{labels}`` -> value of every Slack series on ``/metrics``."""
    async with aiohttp.ClientSession() as session, session.get(f"{health}/metrics") as response:
        text = await response.text()
    found = re.findall(r"^(chorus_slack_[a-z_]+(?:\{[^}]*\})?) ([0-9.e+]+)$", text, re.MULTILINE)
    return {name: float(value) for name, value in found}


async def test_every_signed_event_is_acknowledged_and_the_ignored_ones_counted(
    tmp_path: Path,
) -> None:
    unhandled: list[dict[str, Any]] = json.loads(
        (ROOT / "tests" / "fixtures" / "slack" / "slack_events_unhandled.json").read_text()
    )
    port, health_port = free_port(), free_port()
    events, health = f"http://127.0.0.1:{port}/slack/events", f"http://127.0.0.1:{health_port}"
    async with OpenAIServer() as model, SlackServer(bot_token=BOT_TOKEN) as slack:
        model.default_reply = lambda body: "an answer"
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "openai:gpt-test",
            "OPENAI_API_KEY": "k",
            "OPENAI_BASE_URL": model.base_url,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_BASE_URL": slack.api_url,
            "SLACK_HTTP_HOST": "127.0.0.1",
            "SLACK_HTTP_PORT": str(port),
            "CHORUS_HEALTH_PORT": str(health_port),
            "CHORUS_HEALTH_HOST": "127.0.0.1",
            "CHORUS_INSIGHTS_ENABLED": "false",
            "PYTHONPATH": str(ROOT),
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await _until_listening(events, proc)
            statuses = [await _post(events, body) for body in unhandled]
            retried = await _post(
                events, unhandled[0], headers={"X-Slack-Retry-Num": "1"}
            )  # the same event_id again
            limited = await _post(events, fixture("slack_app_rate_limited"))
            forged = await _post(events, unhandled[1] | {"event_id": "EvForged"}, secret="nope")
            answered = await _post(events, mention("EvStillAnswered", "still there?"))
            await slack.wait_for(lambda: len(slack.posts) >= 1, limit=LIMIT)
            counted = await _metrics(health)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
    err = err_bytes.decode()
    assert proc.returncode == 0, err[-3000:]
    assert statuses == [200] * len(unhandled), statuses
    assert (retried, limited, forged, answered) == (200, 200, 401, 200)
    assert slack.posts[0]["text"] == "an answer"
    types = sorted(body["event"]["type"] for body in unhandled)
    assert {
        name: value
        for name, value in counted.items()
        if name.startswith("chorus_slack_events_ignored_total")
    } == {f'chorus_slack_events_ignored_total{{type="{t}"}}': 1.0 for t in types}
    assert counted["chorus_slack_app_rate_limited_total"] == 1.0
    assert re.search(r"level=warning .*app_rate_limited.*minute_rate_limited=1596183960", err), err[
        -3000:
    ]
    assert "unhandled request" not in err


def test_the_count_is_by_event_type_with_a_bounded_label_set() -> None:
    event = fixture("slack_message")
    event["event"]["type"] = "reaction_added"
    assert kind_of(event) == "reaction_added"
    assert kind_of({"type": "block_actions", "actions": []}) == "block_actions"
    assert kind_of({"command": "/other", "text": ""}) == "command"
    event["event"]["type"] = 'x"} 1\nchorus_fake 2'  # Slack never sends this: not a label
    assert kind_of(event) == "other"
    assert kind_of({"type": ["not", "a", "string"]}) == "other"
