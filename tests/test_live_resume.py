"""A gateway restarted mid-stream finishes the same live message (``LiveAnswers`` with a
``store``): the identity a view reports is saved in Redis (``LiveMessages``, over the embedded
twin and a real Redis), a new process that gets the final reply (or more drafts) of that answer
resumes the message, a final that cannot be put there is sent anew after the partial was
removed, and the saved entry goes with the final."""

from __future__ import annotations

import asyncio

from redis.asyncio import Redis

from adapters.slack.adapter import build_client
from adapters.slack.convert import reply_to_posts
from adapters.slack.drafts import NativeStreams, SlackLive
from adapters.slack.sender import SlackSender
from bot.events import ConversationKey, Reply, ReplyDraft
from bot.platform.streaming import LiveAnswers, answer_key
from bot.state import connect
from bot.state.draft_messages import LiveMessages
from tests.loopback.slack_server import SlackServer
from tests.slack_rig import BOT_TOKEN, slack_settings
from tests.test_drafts import CONV, View, draft, reply
from tests.waiting import until


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def process(store: LiveMessages, views: list[View], **options: object) -> LiveAnswers:
    """One gateway process's streamed answers: each view it opens is recorded in ``views``."""

    def open_view(d: object) -> View:
        views.append(View(ident=f"msg-{len(views) + 1}"))
        views[-1].gate.set()
        return views[-1]

    return LiveAnswers(open_view, interval=0.0, store=store, **options)  # type: ignore[arg-type]


async def saved(redis: Redis, store: LiveMessages, reply_to: str) -> str | None:
    value = await redis.get(store.key(answer_key(CONV, reply_to)))
    return None if value is None else str(value)


async def test_a_restarted_gateway_puts_the_final_into_the_message_it_left(
    redis_url: str, key_tag: str
) -> None:
    redis = await connect.open_redis(redis_url)
    store = LiveMessages(redis, "discord", namespace=key_tag)
    try:
        first: list[View] = []
        crashed = process(store, first)
        crashed.draft(draft("the first words", 1, "r1"))
        await until(lambda: bool(first and first[0].shown), every=0.005)
        await until_saved(redis, store, "r1")
        assert await saved(redis, store, "r1") == '{"id":"msg-1"}'
        assert 0 < await redis.ttl(store.key(answer_key(CONV, "r1"))) <= 900  # kept 15 minutes
        # the process dies here: no finish, no aclose (kill -9)
        second: list[View] = []
        restarted = process(store, second)
        assert await restarted.finish(reply("the whole answer", "r1"))
        (view,) = second
        assert view.resumed == {"id": "msg-1"} and view.finished == ["the whole answer"]
        assert await saved(redis, store, "r1") is None  # gone with the final
        await crashed.aclose()
    finally:
        await redis.aclose()


async def test_drafts_after_a_restart_resume_the_message_too(redis_url: str, key_tag: str) -> None:
    redis = await connect.open_redis(redis_url)
    store = LiveMessages(redis, "slack", namespace=key_tag)
    try:
        first: list[View] = []
        crashed = process(store, first)
        crashed.draft(draft("early", 1, "r2"))
        await until_saved(redis, store, "r2")
        second: list[View] = []
        restarted = process(store, second)
        restarted.draft(draft("early and later", 2, "r2"))
        await until(lambda: bool(second and second[0].shown), every=0.005)
        assert second[0].resumed == {"id": "msg-1"}  # the old message, not a new one
        assert await restarted.finish(reply("final", "r2"))
        assert second[0].finished == ["final"] and len(second) == 1
        assert await saved(redis, store, "r2") is None
        await crashed.aclose()
    finally:
        await redis.aclose()


async def test_a_final_that_cannot_go_into_the_old_message_is_sent_anew_and_the_partial_removed(
    redis_url: str, key_tag: str
) -> None:
    redis = await connect.open_redis(redis_url)
    store = LiveMessages(redis, "slack", namespace=key_tag)
    try:
        await store.save(answer_key(CONV, "r3"), {"id": "deleted-meanwhile"})
        views: list[View] = []

        def open_view(d: object) -> View:
            views.append(View())
            views[-1].fail_finish = True
            return views[-1]

        live = LiveAnswers(open_view, interval=0.0, store=store)
        assert not await live.finish(reply("final", "r3"))  # the adapter posts it
        (view,) = views
        assert view.resumed == {"id": "deleted-meanwhile"} and view.discarded
        assert await saved(redis, store, "r3") is None
    finally:
        await redis.aclose()


async def test_no_lookup_for_answers_that_were_never_streamed_or_after_the_ttl(
    redis_url: str, key_tag: str
) -> None:
    redis = await connect.open_redis(redis_url)
    store = LiveMessages(redis, "slack", namespace=key_tag)
    try:
        await store.save(answer_key(CONV, "r4"), {"id": "old"})
        clock, views = Clock(), list[View]()
        live = process(store, views, ttl=60.0, clock=clock)
        assert not await live.finish(reply("never streamed", "r5")) and views == []
        clock.now = 61.0  # anything a previous process saved has expired by now
        assert not await live.finish(reply("final", "r4")) and views == []
        await store.save(answer_key(CONV, "r7"), {"id": "old too"})
        live.draft(draft("a new answer's first words", 1, "r7"))
        await until(lambda: bool(views and views[0].shown), every=0.005)
        assert views[0].resumed is None  # no lookup for drafts either
        await live.aclose()
    finally:
        await redis.aclose()


async def test_redis_away_costs_the_resume_never_the_answer() -> None:
    dead = Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.2)
    store = LiveMessages(dead, "slack", timeout=1.0)
    views: list[View] = []
    live = process(store, views)
    live.draft(draft("shown anyway", 1, "r6"))
    await until(lambda: bool(views and views[0].shown), every=0.005)
    assert await live.finish(reply("final", "r6"))
    assert views[0].finished == ["final"] and store.failures >= 1
    await dead.aclose()


async def until_saved(redis: Redis, store: LiveMessages, reply_to: str) -> None:
    async with asyncio.timeout(10):
        while True:
            if await saved(redis, store, reply_to) is not None:
                return
            await asyncio.sleep(0.01)


# -- Slack's views against the loopback Web API ---------------------------------------------------
SLACK_THREAD = ConversationKey(platform="slack", channel="C111", thread="1595926230.009600")


def slack_draft(text: str) -> ReplyDraft:
    return ReplyDraft(
        conversation=SLACK_THREAD,
        reply_to_id="C111:1595926230.009600",
        text=text,
        addressed_user_ids=("W222",),
        seq=1,
    )


def slack_final(text: str) -> Reply:
    return Reply(
        conversation=SLACK_THREAD,
        text=text,
        reply_to_id="C111:1595926230.009600",
        addressed_user_ids=("W222",),
    )


async def test_slack_a_resumed_stream_is_stopped_and_updated_a_deleted_one_is_posted_anew(
    key_tag: str,
) -> None:
    redis = await connect.open_redis("memory://")
    store = LiveMessages(redis, "slack", namespace=key_tag)
    async with SlackServer(bot_token=BOT_TOKEN) as server:
        sender = SlackSender(build_client(slack_settings(server)))
        native = NativeStreams()

        def open_view(d: ReplyDraft) -> SlackLive:
            return SlackLive(sender, d, native=native, team_id="T111")

        first = LiveAnswers(open_view, interval=0.0, store=store)
        first.draft(slack_draft("The first words"))
        await server.wait_for(lambda: bool(server.thread_texts("C111")))
        async with asyncio.timeout(10):
            while True:
                if await store.load(answer_key(SLACK_THREAD, "C111:1595926230.009600")):
                    break
                await asyncio.sleep(0.01)
        # a new gateway: the open stream is stopped, the message updated to the final answer
        second = LiveAnswers(open_view, interval=0.0, store=store)
        assert await second.finish(slack_final("The **whole** answer."))
        (expected,) = [p.text for p in reply_to_posts(slack_final("The **whole** answer."))]
        assert server.thread_texts("C111") == [expected]
        assert [m for _, m in server.method_calls].count("chat.stopStream") == 1

        # the message was deleted by someone: the final cannot go there; False = post it anew
        ts = next(iter(server.messages))
        await store.save(answer_key(SLACK_THREAD, "C111:1595926230.009600"), {"ts": [ts]})
        del server.messages[ts]
        third = LiveAnswers(open_view, interval=0.0, store=store)
        assert not await third.finish(slack_final("again"))
        await first.aclose()
        await sender.aclose()
    await redis.aclose()
