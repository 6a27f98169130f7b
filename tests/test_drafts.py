"""Streamed answers, both halves without a platform: the worker's ``DraftStream`` (when drafts
are published, the outbound check before each, a failed publish never failing the turn) and the
gateway's ``LiveAnswers`` (latest wins while a view waits for its rate limit, the final replaces
the drafts once, a late draft never reopens an answer). Clocks and views are stand-ins; the
bus is the real in-process one."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from bot.bus.base import InProcessBus
from bot.bus.topics import outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Outbound, Reply, ReplyDraft
from bot.platform.streaming import LiveAnswers
from bot.router.drafts import DraftPolicy, Drafts
from tests.waiting import until

CONV = ConversationKey(platform="discord", channel="c1")


def message() -> ChatMessage:
    return ChatMessage(
        platform="discord", id="m1", conversation=CONV, author=Author(id="u1"), text="hi"
    )


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def published(bus: InProcessBus) -> list[ReplyDraft]:
    """Every draft on the outbound topic so far (the bus is drained into a list)."""
    found: list[ReplyDraft] = []

    async def read() -> None:
        async for delivery in bus.consume(outbound_topic("discord"), Outbound, group="t"):
            assert isinstance(delivery.event.root, ReplyDraft)
            found.append(delivery.event.root)
            await delivery.ack()

    task = asyncio.create_task(read())
    await bus.drain(timeout=5)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return found


async def test_drafts_wait_for_the_first_delay_then_come_at_most_once_an_interval() -> None:
    bus, clock = InProcessBus(), Clock()
    drafts = Drafts(bus, lambda c: True, clock=clock, policy=DraftPolicy(0.25, 0.25))
    stream = drafts.open(message(), "m1", ("u1",))
    assert stream is not None
    for at, delta in [(0.0, "One "), (0.1, "two "), (0.3, "three "), (0.4, "four "), (0.6, "five")]:
        clock.now = at
        await stream.text(delta)
    shown = await published(bus)
    assert [(d.seq, d.text) for d in shown] == [
        (1, "One two three "),
        (2, "One two three four five"),
    ]
    assert shown[0].addressed_user_ids == ("u1",) and shown[0].reply_to_id == "m1"


async def test_an_answer_done_before_the_first_delay_publishes_no_draft() -> None:
    bus, clock = InProcessBus(), Clock()
    stream = Drafts(bus, lambda c: True, clock=clock).open(message(), "m1", ())
    assert stream is not None
    for delta in ("A quick ", "answer."):
        await stream.text(delta)
    assert await published(bus) == []


async def test_tools_reset_the_text_and_show_what_runs() -> None:
    bus, clock = InProcessBus(), Clock()
    stream = Drafts(bus, lambda c: True, clock=clock).open(message(), "m1", ())
    assert stream is not None
    await stream.text("Let me check.")
    clock.now = 1.0
    await stream.text(" ")
    await stream.reset()
    await stream.working(["fetch_page"])
    shown = await published(bus)
    assert [(d.text, d.status) for d in shown] == [
        ("Let me check. ", None),
        ("", "fetching a page"),
    ]


async def test_every_draft_passes_the_check_and_a_replaced_one_ends_the_stream() -> None:
    bus, clock = InProcessBus(), Clock()
    seen: list[str] = []

    def check(msg: ChatMessage, text: str) -> str:
        seen.append(text)
        return "[withheld]" if "secret" in text else text

    stream = Drafts(bus, lambda c: True, check=check, clock=clock).open(message(), "m1", ())
    assert stream is not None
    for at, delta in [(0.0, "fine "), (0.3, "still fine "), (0.6, "the secret "), (0.9, "more")]:
        clock.now = at
        await stream.text(delta)
    shown = await published(bus)
    assert [d.text for d in shown] == ["fine still fine ", "[withheld]"]
    assert seen == ["fine still fine ", "fine still fine the secret "]
    assert stream.stopped


async def test_a_draft_that_cannot_be_published_stops_the_stream_quietly() -> None:
    bus, clock = InProcessBus(), Clock()
    stream = Drafts(bus, lambda c: True, clock=clock).open(message(), "m1", ())
    assert stream is not None
    await bus.close()
    clock.now = 1.0
    await stream.text("text")
    await stream.working(["x"])
    assert stream.stopped and stream.published == 1


async def test_streaming_follows_the_setting_and_needs_a_message_to_answer() -> None:
    bus = InProcessBus()
    assert Drafts(bus, lambda c: False).open(message(), "m1", ()) is None
    assert Drafts(bus, lambda c: True).open(message(), None, ()) is None


# -- the gateway half -----------------------------------------------------------------------------
class View:
    """A platform's view: one "message" (``ident``) created by the first draft it shows."""

    def __init__(self, ident: str = "msg-1") -> None:
        self.gate = asyncio.Event()
        self.shown: list[str] = []
        self.finished: list[str] = []
        self.ident = ident
        self.created = False
        self.resumed: dict[str, Any] | None = None
        self.discarded = False
        self.fail_finish = False

    async def pace(self) -> None:
        await self.gate.wait()

    async def show(self, draft: ReplyDraft) -> None:
        self.created = True
        self.shown.append(draft.text)

    async def finish(self, reply: Reply) -> None:
        if self.fail_finish:
            raise RuntimeError("message_not_found")
        self.finished.append(reply.text)

    def state(self) -> dict[str, Any] | None:
        return {"id": self.ident} if self.created else None

    def resume(self, state: Mapping[str, Any]) -> None:
        self.resumed, self.created = dict(state), True

    async def discard(self) -> None:
        self.discarded = True


def draft(text: str, seq: int, reply_to: str = "m1") -> ReplyDraft:
    return ReplyDraft(conversation=CONV, reply_to_id=reply_to, text=text, seq=seq)


def reply(text: str, reply_to: str = "m1") -> Reply:
    return Reply(conversation=CONV, text=text, reply_to_id=reply_to)


async def test_the_latest_draft_wins_while_a_view_waits_and_the_final_replaces_them() -> None:
    views: list[View] = []

    def open_view(d: ReplyDraft) -> View:
        views.append(View())
        return views[-1]

    live = LiveAnswers(open_view, interval=0.0)
    for n in range(1, 6):
        live.draft(draft(f"text {n}", n))
    (view,) = views
    view.gate.set()
    await until(lambda: bool(view.shown), every=0.005)
    assert view.shown == ["text 5"]
    assert await live.finish(reply("final"))
    assert view.finished == ["final"] and live.active == 0
    live.draft(draft("late, from a worker that lost its claim", 9))
    assert len(views) == 1 and live.active == 0


async def test_an_answer_nothing_was_shown_for_is_sent_the_usual_way() -> None:
    views: list[View] = []

    def open_view(d: ReplyDraft) -> View:
        views.append(View())
        return views[-1]

    live = LiveAnswers(open_view, interval=0.0)
    assert not await live.finish(reply("sent whole", "m2"))
    live.draft(draft("a draft after its final", 1, "m2"))
    assert views == []
    live.draft(draft("shown never: the view waits", 1, "m3"))
    assert not await live.finish(reply("whole", "m3"))  # nothing reached the platform
    assert views[0].finished == []
    await live.aclose()


async def test_an_answer_whose_final_never_comes_is_forgotten_after_its_ttl() -> None:
    clock, views = Clock(), []

    def open_view(d: ReplyDraft) -> View:
        views.append(View())
        return views[-1]

    live = LiveAnswers(open_view, interval=0.0, ttl=60.0, clock=clock)
    live.draft(draft("abandoned: its worker died and nobody took it over", 1, "m4"))
    clock.now = 61.0
    live.draft(draft("another answer", 1, "m5"))
    assert live.active == 1 and len(views) == 2
    await live.aclose()


async def test_a_finished_answer_drops_late_drafts_for_its_ttl_the_latest_ones_only() -> None:
    clock, views = Clock(), list[View]()

    def open_view(d: ReplyDraft) -> View:
        views.append(View())
        return views[-1]

    live = LiveAnswers(open_view, interval=0.0, ttl=60.0, remember=2, clock=clock)
    for answer in ("m1", "m2", "m3"):
        assert not await live.finish(reply("sent whole", answer))
    clock.now = 59.0
    live.draft(draft("late, from a worker that lost its claim", 2, "m3"))
    assert views == []  # finished 59 s ago: dropped
    live.draft(draft("late", 2, "m1"))
    assert len(views) == 1  # only the two latest finished answers are remembered
    clock.now = 61.0
    live.draft(draft("late", 2, "m2"))
    assert len(views) == 2  # finished longer than the TTL ago: forgotten
    await live.aclose()
