"""The dashboard's live channels page over aiohttp's test client and the store (embedded and
real Redis): ambient Discord and Slack channels are listed next to Twitch and YouTube with
their rates and pause state, and their pause is the one ``!chorus pause`` keeps (both ways)."""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from redis.asyncio import Redis

from bot.admin.server import AdminServer
from bot.admin.views import Sources, ambient_channels
from bot.engagement.policy import Action, Reason
from bot.engagement.turns import LiveChat
from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.memory.buffers import MemoryStore
from bot.safety.audit import Audit
from bot.settings import Settings, load_settings
from bot.state import keys, turnlog
from bot.state.engagement import RedisLiveStore
from bot.state.history import HistoryStore
from tests.test_admin import TOKEN

Client = TestClient[web.Request, web.Application]
BEARER = {"Authorization": f"Bearer {TOKEN}"}


def sources(redis: Redis, settings: Settings, namespace: str) -> Sources:
    return Sources(
        settings=settings,
        redis=redis,
        memory=MemoryStore(redis),
        history=HistoryStore(redis, max_messages=20, ttl_seconds=3600),
        audit=Audit(redis, namespace=namespace),
    )


@pytest.fixture
def discord_channel() -> str:
    return str(random.randrange(10**17, 10**18))  # a snowflake; its keys are removed below


@pytest.fixture
async def http(redis_client: Redis, key_tag: str, discord_channel: str) -> AsyncIterator[Client]:
    env = {"DISCORD_AMBIENT_CHANNELS": discord_channel, "SLACK_AMBIENT_CHANNELS": f"C{key_tag}"}
    settings = load_settings(environ=env, env_file=None, config=False, warn=False)
    server = AdminServer(sources(redis_client, settings, key_tag), TOKEN)
    discord = ConversationKey(platform="discord", channel=discord_channel)
    try:
        async with TestClient(TestServer(server.app())) as client:
            yield client
    finally:
        await redis_client.delete(*(keys.live(k, discord) for k in ("chan", "users", "answered")))
        await redis_client.delete(keys.turn_log(discord))
        await redis_client.zrem(keys.recent_conversations("discord"), str(discord))


def record(n: int, decision: turnlog.Decision, at: float) -> turnlog.TurnRecord:
    return turnlog.TurnRecord(
        at=at, message_id=f"m{n}", user_id="u1", user_name="Ada", decision=decision
    )


def ambient(conv: ConversationKey, msg_id: str, text: str, *, moderator: bool) -> ChatMessage:
    roles = frozenset({Role.MODERATOR}) if moderator else frozenset()
    return ChatMessage(
        platform=conv.platform,
        id=msg_id,
        conversation=conv,
        author=Author(id="mod" if moderator else "viewer", roles=roles),
        text=text,
        ambient=True,
    )


def row(page: str, conv: ConversationKey) -> str:
    """The table row of ``conv`` on the live page."""
    start = page.index(f"{conv.platform} / {conv.channel}")
    return page[start : page.index("</tr>", start)]


@pytest.mark.redis
async def test_ambient_channels_are_listed_with_rates_and_their_threads(
    http: Client, redis_client: Redis, key_tag: str, discord_channel: str
) -> None:
    discord = ConversationKey(platform="discord", channel=discord_channel)
    thread = ConversationKey(platform="slack", channel=f"C{key_tag}", thread="1700000000.000100")
    now = time.time()
    decisions: list[turnlog.Decision] = ["answered", "quiet"] * 5  # 10 in 5 minutes
    async with redis_client.pipeline() as pipe:
        turnlog.queue_records(
            pipe, discord, [record(n, d, now - 10 * n) for n, d in enumerate(decisions)]
        )
        turnlog.queue_records(pipe, thread, [record(0, "answered", now)])
        await pipe.execute()
    page = await (await http.get("/live", headers=BEARER)).text()
    mine = row(page, discord)
    assert "ambient" in mine and "<td>2.0</td><td>1.0</td>" in mine  # per minute, replies
    assert "live" in mine and "Pause" in mine
    assert "ambient" in row(page, ConversationKey(platform="slack", channel=f"C{key_tag}"))
    assert f"slack / C{key_tag} / 1700000000.000100" in page  # a thread: a pause of its own


@pytest.mark.redis
async def test_an_ambient_pause_is_the_one_chorus_pause_keeps_both_ways(
    http: Client, redis_client: Redis, key_tag: str, discord_channel: str
) -> None:
    from tests.test_admin import login

    conv = ConversationKey(platform="discord", channel=discord_channel)
    csrf = await login(http)
    paused = await http.post(
        f"/live/{conv}/pause", data={"paused": "1", "csrf": csrf}, allow_redirects=False
    )
    assert paused.status == 303
    assert "Resume" in row(await (await http.get("/live")).text(), conv)
    # A worker's live chat (its own process state) honours it: an ambient line is ignored.
    worker = LiveChat(store=RedisLiveStore(redis_client))
    line = ambient(conv, f"a-{key_tag}", "anyone here?", moderator=False)
    await worker.prepare(line)
    assert worker.observe(line).reason is Reason.PAUSED
    # A moderator's `!chorus resume` there reaches the dashboard the same way.
    resume = ambient(conv, f"r-{key_tag}", "!chorus resume", moderator=True)
    await worker.prepare(resume)
    assert worker.observe(resume).action is Action.COMMAND
    await worker.maintain()
    assert "Pause" in row(await (await http.get("/live")).text(), conv)


@pytest.mark.redis
async def test_a_dashboard_pause_reaches_every_worker_holding_a_busy_channel(
    http: Client, redis_client: Redis, key_tag: str, discord_channel: str
) -> None:
    """Two workers (their own live-chat memory, the shared store) hold a busy ambient channel:
    neither would re-read it, yet the dashboard's pause and resume reach both with their next
    one-second ``maintain`` pass (the pause feed), and the dashboard runs in neither."""
    conv = ConversationKey(platform="discord", channel=discord_channel)
    clock = [1_750_000_000.0]
    workers = [LiveChat(clock=lambda: clock[0], store=RedisLiveStore(redis_client)) for _ in "ab"]
    lines = iter(range(1000))

    async def chat(worker: LiveChat) -> Reason:
        line = ambient(conv, f"{key_tag}-{next(lines)}", "just chatting", moderator=False)
        await worker.prepare(line)
        return worker.observe(line).reason

    for worker in workers:
        assert await chat(worker) is not Reason.PAUSED
    for paused, expected in (("1", Reason.PAUSED), ("0", None)):
        done = await http.post(f"/live/{conv}/pause", data={"paused": paused}, headers=BEARER)
        assert done.status == 200  # after the redirect
        clock[0] += 1  # busy: one line a second, never quiet long enough to be read again
        for worker in workers:
            await chat(worker)
            await worker.maintain()
        clock[0] += 1
        for worker in workers:
            reason = await chat(worker)
            assert (reason is Reason.PAUSED) == (expected is Reason.PAUSED), reason


def test_a_channel_scope_in_ambient_mode_is_an_ambient_channel_of_the_page(
    tmp_path: Path,
) -> None:
    config = tmp_path / "chorus.toml"
    config.write_text(
        '[[scope]]\nmatch = "discord:123456789012345678/223456789012345678"\n'
        'engagement.mode = "ambient"\n\n'
        '[[scope]]\nmatch = "slack:T1/C2"\nengagement.mode = "ambient"\n',
        encoding="utf-8",
    )
    env = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0001", "SLACK_AMBIENT_CHANNELS": "C1"}
    settings = load_settings(environ=env, env_file=None, config=config, warn=False)
    assert ambient_channels(settings) == {"discord": {"223456789012345678"}, "slack": {"C1", "C2"}}
