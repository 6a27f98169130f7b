"""A streamed answer through the real Slack adapter (bolt and slack-sdk against the loopback Web
API, ``tests/slack_rig.py``), with the drafts and the final reply published as a worker does:

- the first draft opens a stream in the thread; a tool shows as the thread's assistant status;
- a draft that starts over (the model called a tool) cannot shrink a stream: the stream is
  stopped and the message updated from then on, the status cleared;
- the final answer makes the message exactly what an unstreamed reply posts (mrkdwn, mention
  safety), and a draft after it changes nothing;
- a top-level DM (no thread to stream into) is posted, then updated.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.slack.convert import reply_to_posts
from bot.bus.topics import outbound_topic
from bot.events import ConversationKey, Reply, ReplyDraft
from tests.loopback.slack_server import SlackServer
from tests.slack_rig import BOT_TOKEN, Rig, running_rig

THREAD = ConversationKey(platform="slack", channel="C111", thread="1595926230.009600")
DM = ConversationKey(platform="slack", channel="D222")
TOPIC = outbound_topic("slack")


@pytest.fixture
async def server() -> AsyncIterator[SlackServer]:
    async with SlackServer(bot_token=BOT_TOKEN) as srv:
        yield srv


@pytest.fixture
async def rig(server: SlackServer) -> AsyncIterator[Rig]:
    async for value in running_rig(server):
        yield value


def draft(conv: ConversationKey, text: str, seq: int, status: str | None = None) -> ReplyDraft:
    return ReplyDraft(
        conversation=conv,
        reply_to_id=f"{conv.channel}:1595926230.009600",
        text=text,
        status=status,
        addressed_user_ids=("W222",),
        seq=seq,
    )


def final(conv: ConversationKey, text: str) -> Reply:
    return Reply(
        conversation=conv,
        text=text,
        reply_to_id=f"{conv.channel}:1595926230.009600",
        addressed_user_ids=("W222",),
    )


def bodies(server: SlackServer, method: str) -> list[dict[str, object]]:
    return [r.body for r in server.calls(f"/api/{method}")]


async def test_a_stream_that_starts_over_is_edited_and_ends_as_the_unstreamed_reply(
    rig: Rig, server: SlackServer
) -> None:
    await rig.bus.publish(TOPIC, draft(THREAD, "Let me check.", 1))
    await server.wait_for(lambda: bool(bodies(server, "chat.startStream")))
    await rig.bus.publish(TOPIC, draft(THREAD, "", 2, status="fetching a page"))
    await server.wait_for(lambda: bool(bodies(server, "assistant.threads.setStatus")))
    await rig.bus.publish(TOPIC, draft(THREAD, "It says 42, @here", 3))
    await server.wait_for(lambda: bool(bodies(server, "chat.update")), limit=10)
    answer = "It says **42**, @here <!channel>."
    await rig.bus.publish(TOPIC, final(THREAD, answer))
    (expected,) = [post.text for post in reply_to_posts(final(THREAD, answer))]
    await server.wait_for(lambda: server.thread_texts("C111") == [expected], limit=10)
    await rig.bus.publish(TOPIC, draft(THREAD, "a late draft", 9))
    await rig.settle()
    assert server.thread_texts("C111") == [expected]
    started = bodies(server, "chat.startStream")[0]
    assert started["markdown_text"] == "Let me check." and started["recipient_team_id"] == "T111"
    statuses = [b["status"] for b in bodies(server, "assistant.threads.setStatus")]
    assert statuses == ["is fetching a page…", ""]
    assert len(bodies(server, "chat.stopStream")) == 1
    assert "@here" not in str(bodies(server, "chat.update")) and "<!channel>" not in expected


async def test_a_top_level_dm_is_posted_then_updated(rig: Rig, server: SlackServer) -> None:
    await rig.bus.publish(TOPIC, draft(DM, "The first part", 1))
    await server.wait_for(lambda: bool(server.posts))
    await rig.bus.publish(TOPIC, final(DM, "The first part, and the rest."))
    await server.wait_for(
        lambda: server.thread_texts("D222") == ["The first part, and the rest."], limit=10
    )
    assert not bodies(server, "chat.startStream") and len(server.posts) == 1
    assert "thread_ts" not in server.posts[0]
