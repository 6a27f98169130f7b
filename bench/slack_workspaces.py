"""What Slack in many workspaces costs each answered mention in Redis and in Slack API calls.

The real Slack adapter (bolt, slack-sdk) in many-workspace mode runs against the loopback Slack
and a private ``redis-server`` started here; a stand-in router answers every mention at once.
Signed mentions are posted in three shapes -- each in a new thread by the same member, each in
a new thread by a new member, all in one thread by one member -- and the Redis commands of each
phase are read from ``INFO commandstats`` (reset before it). The adapter alone is counted: the
router's turn (history, memory, claims) is the same in both modes and is not run here. Also
counted: ``auth.test`` calls over every event (bolt's cache). The wall time is Slack's pacing of
one message a second per channel, not work, so it is not reported.

Run: ``python -m bench.slack_workspaces`` (needs ``redis-server`` on the PATH).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import tempfile
from collections.abc import Callable

from cryptography.fernet import Fernet
from slack_sdk.oauth.installation_store.models.installation import Installation

from adapters.slack.adapter import SlackAdapter
from bot.bus.base import InProcessBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import ChatMessage, Reply
from bot.settings import SlackSettings
from bot.state import connect
from bot.state.connect import Client
from tests.loopback.slack_server import CLIENT_ID, CLIENT_SECRET, SlackServer, Workspace
from tests.redis_server import free_port
from tests.slack_rig import SECRET, fixture, post_signed

MENTIONS = 20  # per phase; Slack's pacing makes each phase last about this many seconds
TEAM, CHANNEL = "T0BENCH", "C0BENCH"
ROOT_TS = "1700000000.000000"


def _mention(space: Workspace, n: int, user: str, thread: str | None) -> bytes:
    body = fixture("slack_app_mention_bolt_test")
    body.pop("enterprise_id")
    ts = f"1700000000.{n:06d}"
    body.update(team_id=TEAM, event_id=f"EvBench{n}")
    body["event"].update(
        text=f"<@{space.bot_user_id}> hi", user=user, team=TEAM, channel=CHANNEL, ts=ts, event_ts=ts
    )
    if thread is not None:
        body["event"]["thread_ts"] = thread
    return json.dumps(body).encode()


async def _answer(bus: InProcessBus) -> None:
    async for delivery in bus.consume(INBOUND, ChatMessage, group="agent"):
        message = delivery.event
        reply = Reply(
            conversation=message.conversation,
            text="ok",
            reply_to_id=message.id,
            addressed_user_ids=(message.author.id,),
            in_reply_to_platform="slack",
        )
        await bus.publish(outbound_topic("slack"), reply)
        await delivery.ack()


async def _phase(
    redis: Client,
    slack: SlackServer,
    url: str,
    first: int,
    user: Callable[[int], str],
    thread: str | None,
) -> dict[str, int]:
    await redis.config_resetstat()
    before = len(slack.posts)
    for n in range(first, first + MENTIONS):
        await post_signed(url, _mention(slack.workspaces[TEAM], n, user(n), thread))
    await slack.wait_for(lambda: len(slack.posts) >= before + MENTIONS, limit=MENTIONS * 5)
    stats = await redis.info("commandstats")
    return {
        name.removeprefix("cmdstat_"): int(value["calls"])
        for name, value in stats.items()
        if name not in ("cmdstat_config|resetstat", "cmdstat_hello")
    }


async def main() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        return "## Slack in many workspaces\n\nskipped: no redis-server on the PATH\n"
    port = free_port()
    with tempfile.TemporaryDirectory() as workdir:
        server = await asyncio.create_subprocess_exec(
            *(binary, "--port", str(port), "--save", "", "--appendonly", "no", "--dir", workdir),
            stdout=asyncio.subprocess.DEVNULL,
        )
        try:
            return await _measure(port)
        finally:
            server.terminate()
            await asyncio.wait_for(server.wait(), 10)


async def _measure(port: int) -> str:
    redis = await _connect(port)
    bus = InProcessBus()
    async with SlackServer() as slack:
        space = slack.add_workspace(TEAM, channels=(CHANNEL,))
        settings = SlackSettings(  # type: ignore[call-arg]
            SLACK_CLIENT_ID=CLIENT_ID,
            SLACK_CLIENT_SECRET=CLIENT_SECRET,
            SLACK_TOKEN_ENCRYPTION_KEY=Fernet.generate_key().decode(),
            SLACK_SIGNING_SECRET=SECRET,
            SLACK_API_BASE_URL=slack.api_url,
            SLACK_HTTP_HOST="127.0.0.1",
            SLACK_HTTP_PORT=0,
        )
        adapter = SlackAdapter(bus, settings, redis=redis)
        assert adapter.workspaces is not None
        issued = slack.issue(space)
        installed = Installation(
            team_id=TEAM,
            bot_token=issued["access_token"],
            bot_user_id=space.bot_user_id,
            bot_id=space.bot_id,
            user_id="UINSTALLER",
        )
        await adapter.workspaces.installations.async_save(installed)
        await adapter.start()
        router = asyncio.create_task(_answer(bus))
        try:
            url = str(adapter.http_url)
            await post_signed(url, _mention(space, 0, "UWARM", None))  # the thread of phase 3
            await slack.wait_for(lambda: len(slack.posts) >= 1, limit=60)
            phases = {
                "a new thread each, one member": await _phase(
                    redis, slack, url, 1, lambda n: "U0SAME", None
                ),
                "a new thread each, a new member each": await _phase(
                    redis, slack, url, 1001, lambda n: f"U0NEW{n}", None
                ),
                "one thread, one member": await _phase(
                    redis, slack, url, 2001, lambda n: "UWARM", ROOT_TS
                ),
            }
            events = 1 + 3 * MENTIONS
            auth_tests = len(slack.calls("/api/auth.test"))
        finally:
            await adapter.aclose()
            router.cancel()
            await bus.close()
            await redis.aclose()
    lines = [
        "## Slack in many workspaces: per answered mention (adapter only)",
        "",
        f"{MENTIONS} mentions per row, `python -m bench.slack_workspaces`.",
        "",
        "| mentions | Redis commands / mention | commands |",
        "|---|---|---|",
    ]
    for label, calls in phases.items():
        total = sum(calls.values())
        detail = ", ".join(f"{name} {count}" for name, count in sorted(calls.items()))
        lines.append(f"| {label} | {total / MENTIONS:.2f} | {detail} |")
    lines += ["", f"`auth.test` calls over {events} events of one workspace: {auth_tests}", ""]
    return "\n".join(lines)


async def _connect(port: int) -> Client:
    for _ in range(50):
        try:
            return await connect.open_redis(f"redis://127.0.0.1:{port}/0")
        except Exception:
            await asyncio.sleep(0.1)
    raise RuntimeError("the benchmark's redis-server did not start")


if __name__ == "__main__":
    print(asyncio.run(main()))
