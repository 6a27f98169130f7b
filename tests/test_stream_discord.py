"""Streamed answers through the real Discord adapter (discord.py against the loopback stand-in,
``tests/discord_rig.py``), with a stand-in worker publishing the drafts and the final reply:

- an answer past 2,000 characters grows into a second message while it streams and ends as
  exactly the pieces of an unstreamed reply (code block closed and re-opened);
- a final answer shorter than its drafts deletes the messages it no longer needs;
- a gateway that crashed after showing a draft: the next one's final answer finds the draft by
  its nonce and edits it, one message in the end;
- every channel's message calls stay within 5 per 5 seconds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from adapters.discord.convert import reply_to_outgoing
from bot.bus.topics import outbound_topic
from bot.events import ChatMessage, Reply, ReplyDraft
from tests.discord_rig import Rig, mention, running
from tests.loopback.discord_server import CHANNEL_ID, DiscordServer, guild_create
from tests.test_stream_discord_e2e import within_rate

CODE = "```python\n" + "\n".join(f"value_{i} = {i} * 2  # doubled" for i in range(60)) + "\n```"
LONG = ("A sentence of the long answer. " * 40) + "\n\n" + CODE + "\n\nThat is all. " * 30


@pytest.fixture
async def server() -> AsyncIterator[DiscordServer]:
    async with DiscordServer() as srv:
        srv.guilds = [guild_create()]
        yield srv


def final(message: ChatMessage, text: str) -> Reply:
    return Reply(
        conversation=message.conversation,
        text=text,
        reply_to_id=message.id,
        addressed_user_ids=(message.author.id,),
    )


def shown(server: DiscordServer) -> list[str]:
    return [m["content"] for m in server.channel_messages(CHANNEL_ID)]


class Worker:
    """Publishes drafts of ``text`` (waiting until each is on screen), then ``answer``."""

    def __init__(self, cuts: list[int], answer: str | None, *, draft_text: str = LONG) -> None:
        self.cuts, self.answer, self.draft_text = cuts, answer, draft_text
        self.rig: Rig | None = None

    async def __call__(self, message: ChatMessage) -> str | None:
        assert self.rig is not None
        server, topic = self.rig.server, outbound_topic("discord")
        for seq, cut in enumerate(self.cuts, start=1):
            text = self.draft_text[:cut]
            draft = ReplyDraft(
                conversation=message.conversation,
                reply_to_id=message.id,
                text=text,
                addressed_user_ids=(message.author.id,),
                seq=seq,
            )
            await self.rig.bus.publish(topic, draft)
            head, size = text.strip()[:40], len(text) - 50

            def visible(head: str = head, size: int = size) -> bool:
                contents = shown(server)
                return any(c.startswith(head) for c in contents) and sum(map(len, contents)) >= size

            await server.wait_for(visible, limit=30)
        return self.answer


async def test_a_long_streamed_answer_ends_as_the_pieces_of_an_unstreamed_one(
    server: DiscordServer,
) -> None:
    worker = Worker([600, 1500, 2600], LONG)
    async with running(server, worker) as rig:
        worker.rig = rig
        await server.dispatch("MESSAGE_CREATE", mention(1001, "explain at length"))
        (message,) = await rig.wait_seen(1)
        expected = [p.content for p in reply_to_outgoing(final(message, LONG))]
        await server.wait_for(lambda: shown(server) == expected, limit=30)
    assert len(expected) >= 3 and all(len(c) <= 2000 for c in expected)
    assert all(c.count("```") % 2 == 0 for c in expected)
    assert len(server.created) == len(expected), "no message posted twice"
    first = server.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")[0].body
    assert first["message_reference"]["message_id"] == 1001
    assert within_rate(server), server.message_calls


async def test_a_final_answer_shorter_than_its_drafts_removes_the_extra_messages(
    server: DiscordServer,
) -> None:
    worker = Worker([2600], "In short: it works.")
    async with running(server, worker) as rig:
        worker.rig = rig
        await server.dispatch("MESSAGE_CREATE", mention(1002, "and briefly?"))
        await server.wait_for(lambda: shown(server) == ["In short: it works."], limit=30)
    assert len(server.created) == 2
    assert [r.method for r in server.requests if r.method == "DELETE"] == ["DELETE"]


async def test_the_next_gateway_finds_a_crashed_ones_draft_by_its_nonce(
    server: DiscordServer,
) -> None:
    first = Worker([300], None)  # a draft, then nothing: this gateway "crashes"
    async with running(server, first) as rig:
        first.rig = rig
        await server.dispatch("MESSAGE_CREATE", mention(1003, "hello?"))
        await server.wait_for(lambda: len(shown(server)) == 1, limit=30)
    partial = shown(server)
    answer = "The answer, from after the restart."
    second = Worker([], answer)
    async with running(server, second) as rig:
        second.rig = rig
        await server.wait_op(2, 2)  # the second gateway connection is up
        await server.dispatch("MESSAGE_CREATE", mention(1003, "hello?"))  # redelivered
        await server.wait_for(lambda: shown(server) == [answer], limit=30)
    assert partial != [answer] and len(server.created) == 1
