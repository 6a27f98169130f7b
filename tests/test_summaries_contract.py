"""Summaries and community notes over both backends (``memory://`` and a real Redis), with the
scripted insights model: lines kept until summarised, a summary per day with its provenance,
the daily run, community notes, budgets, outages, and /forget (also racing a run). Time is
injected; nothing sleeps."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from redis.asyncio import Redis

from bot.events import ConversationKey
from bot.llm.errors import ProviderUnavailable
from bot.llm.scripted import Script, ScriptedProvider
from bot.llm.types import LLMRequest, LLMResponse
from bot.memory import summaries as chan
from bot.memory.buffers import MemorySettings, MemoryStore
from bot.state import keys
from bot.state.history import HistoryEntry, HistoryStore
from bot.state.insight_jobs import Budget
from bot.state.people import forgotten
from bot.state.redis_turn import RedisTurnStore
from bot.state.summaries import SummaryStore
from bot.state.turn import HistoryAppend, TurnChanges
from insights.summariser import Summariser
from tests.redis_cluster import WITH_CLUSTER, store_url
from tests.turn_rig import read_summaries


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


T0 = datetime(2025, 3, 10, 12, 0, tzinfo=UTC)
_LINE = re.compile(r'<line(?: id="(L\d+)")? from="([^"]*)"[^>]*>([^<]*)</line>')


def scripted_model(request: LLMRequest) -> Script:
    """Deterministic insights model: a summary quoting every user line; a note citing the first
    user line; the mood 'busy'."""
    text = request.messages[-1].text
    lines = [(label, who, said) for label, who, said in _LINE.findall(text) if who != "assistant"]
    if "current_notes" in text:
        label = lines[0][0] if lines else "L1"
        note = {
            "kind": "topic",
            "text": f"talks about {lines[0][2]}",
            "source_line": label,
            "confidence": 0.8,
        }
        return json.dumps({"notes": [note], "mood": "busy"})
    earlier = re.search(r"<earlier_summary[^>]*>\n(.*?)\n?</earlier_summary>", text, re.S)
    said = " / ".join(f"{who}: {words}" for _, who, words in lines)
    prefix = earlier[1].strip() + " + " if earlier and earlier[1].strip() else ""
    return json.dumps({"summary": (prefix + said)[:600]})


class Rig:
    def __init__(self, redis: Redis, tag: str, **settings: object) -> None:
        self.redis = redis
        self.tag = tag
        self.settings = MemorySettings.model_validate({"CHORUS_SUMMARY_AFTER_LINES": 4, **settings})
        room = chan.history_room(self.settings)  # keep lines past the window; probe 4
        self.history = HistoryStore(redis, max_messages=10, ttl_seconds=3600, **room)
        self.memory = MemoryStore(redis, self.settings)
        self.provider = ScriptedProvider(responder=scripted_model)
        self.conv = ConversationKey(platform="discord", channel=f"general-{tag}")
        self.plan = chan.SummaryPlan(ttl_days=30, community=False)
        self.clock = T0
        self.turns = 0

    def summariser(self) -> Summariser:
        budget = Budget(
            self.redis, user_daily=10**9, channel_daily=self.settings.insights_channel_daily_tokens
        )
        return Summariser(
            self.redis,
            self.provider,
            "cheap",
            self.settings,
            budget,
            history_max=self.history.max_messages,
            clock=lambda: self.clock,
            queue=self.tag,
        )

    def id(self, who: str) -> str:
        """A user id unique to this test (a real Redis is shared)."""
        return f"{who}-{self.tag}"

    async def turn(self, who: str, text: str, at: datetime) -> None:
        """What the router reads and writes for one answered turn (the history, whether lines
        wait past its window, the summary schedule)."""
        self.turns += 1
        entries = (
            HistoryEntry(
                role="user",
                text=text,
                message_id=f"{self.tag}-{self.turns}",
                author_id=self.id(who),
                author_name=who.title(),
                at=at,
            ),
            HistoryEntry(role="assistant", text=f"ok {self.turns}", at=at),
        )
        async with self.redis.pipeline(transaction=False) as pipe:
            self.history.queue_load(pipe, self.conv)
            [raw] = await pipe.execute()
        waiting = self.history.waiting(raw)
        due = chan.due(
            self.conv, self.plan, at, waiting=waiting, touch=True, ttl_seconds=3600, queue=self.tag
        )
        store = RedisTurnStore(self.redis, history=self.history)
        await store.write(
            TurnChanges(history=HistoryAppend(self.conv, entries, keep=True), summary=due)
        )

    async def summaries(self) -> tuple[chan.Summary, ...]:
        return chan.load_summaries(await self.redis.get(keys.summary("sum", self.conv)))

    async def community(self) -> chan.Community:
        return chan.load_community(await self.redis.get(keys.summary("notes", self.conv)))

    async def held(self) -> int:
        """Lines in the history list: the window and those kept past it."""
        return int(await self.redis.llen(keys.history(self.conv)))

    async def cleanup(self) -> None:
        await self.redis.delete(keys.summary_queue(self.tag))


@pytest.fixture
async def rig(redis_client: Redis, key_tag: str) -> AsyncIterator[Rig]:
    made = Rig(redis_client, key_tag)
    yield made
    await made.cleanup()


@pytest.mark.redis
async def test_lines_leaving_the_history_are_summarised_with_their_provenance(rig: Rig) -> None:
    for n in range(8):  # 16 lines, the history keeps 10: 6 have left it
        await rig.turn("ada" if n % 2 else "bo", f"line {n}", T0)
    assert await rig.held() == 16  # the window of 10, and 6 kept past it for the summary
    assert await rig.summariser().run_once(T0) == [(str(rig.conv), "summarised")]
    (day,) = await rig.summaries()
    assert (
        day.day == "2025-03-10"
        and day.lines == 6
        and set(day.users) == {rig.id("ada"), rig.id("bo")}
    )
    assert "Bo: line 0" in day.text and "line 3" not in day.text
    assert await rig.held() == 10  # the summarised lines left; the window's lines wait
    ttl = await rig.redis.ttl(keys.summary("sum", rig.conv))
    assert 29 * 86400 < ttl <= 30 * 86400
    assert await rig.redis.zrange(keys.user("discord", rig.id("ada"), "summ"), 0, -1) == [
        str(rig.conv)
    ]
    assert await rig.summariser().run_once(T0) == []  # nothing due until the day ends
    rig.clock = T0 + timedelta(days=1)
    assert await rig.summariser().run_once(rig.clock) == [(str(rig.conv), "summarised")]
    (day,) = await rig.summaries()
    assert day.lines == 16 and day.text.startswith("Bo: line 0") and "line 7" in day.text
    assert await rig.held() == 10  # the window stays whole for the prompt
    # The model saw the earlier summary of the day, so one summary covers both runs.
    assert "line 0" in rig.provider.requests[-1].messages[0].text
    rig.clock = T0 + timedelta(days=2)  # nothing new: one empty look, then no longer due
    assert await rig.summariser().run_once(rig.clock) == [(str(rig.conv), "nothing_ready")]
    assert not await rig.redis.zcard(keys.summary_queue(rig.tag))


@pytest.mark.redis
async def test_each_day_gets_its_own_summary_and_a_reply_stays_with_its_line(rig: Rig) -> None:
    await rig.turn("ada", "the meetup moves to Friday", T0 - timedelta(days=2))
    await rig.turn("bo", "see you there", T0 - timedelta(days=1))
    # Two lines only (no pile-up), but their days are over: the daily job takes them.
    assert await rig.summariser().run_once(T0) == [(str(rig.conv), "summarised")]
    days = await rig.summaries()
    assert [(s.day, s.users, s.lines) for s in days] == [
        ("2025-03-08", (rig.id("ada"),), 2),
        ("2025-03-09", (rig.id("bo"),), 2),
    ]


@pytest.mark.redis
async def test_community_notes_keep_the_line_they_came_from(
    redis_client: Redis, key_tag: str
) -> None:
    rig = Rig(redis_client, key_tag)
    rig.plan = chan.SummaryPlan(ttl_days=7, community=True)
    try:
        for n in range(8):
            await rig.turn("ada", f"rust {n}", T0)
        await rig.summariser().run_once(T0)
        community = await rig.community()
        (note,) = community.notes
        assert (note.user, note.message_id, note.at) == (rig.id("ada"), f"{key_tag}-1", T0)
        assert note.text == "talks about rust 0" and community.mood == "busy"
        ttl = await redis_client.ttl(keys.summary("notes", rig.conv))
        assert 6 * 86400 < ttl <= 7 * 86400
    finally:
        await rig.cleanup()


@pytest.mark.redis
async def test_forget_drops_what_the_users_lines_fed_and_keeps_the_rest(
    redis_client: Redis, key_tag: str
) -> None:
    rig = Rig(redis_client, key_tag)
    rig.plan = chan.SummaryPlan(ttl_days=30, community=True)
    try:
        await rig.turn("ada", "ada's plan", T0 - timedelta(days=2))
        await rig.turn("bo", "bo's plan", T0 - timedelta(days=1))
        rig.clock = T0
        await rig.summariser().run_once(T0)
        assert len(await rig.summaries()) == 2 and (await rig.community()).notes
        await rig.turn("ada", "ada again", T0)  # pending, not summarised yet
        await rig.history.forget_author(rig.conv, rig.id("ada"))
        # No conversation given: the user's summary index finds the summaries and notes.
        gone = await chan.forget_user(SummaryStore(redis_client), "discord", rig.id("ada"), [])
        assert (gone.summaries, gone.notes) == (1, 1)
        assert [s.users for s in await rig.summaries()] == [(rig.id("bo"),)]
        community = await rig.community()
        assert not community.notes and community.mood == ""  # ada's note and the mood she fed
        # Her line awaiting a summary went with her history lines (the replies stay).
        left = await rig.redis.lrange(keys.history(rig.conv), 0, -1)
        authors = {HistoryEntry.model_validate_json(raw).author_id for raw in left}
        assert rig.id("ada") not in authors and rig.id("bo") in authors
        assert not await redis_client.exists(keys.user("discord", rig.id("ada"), "summ"))
    finally:
        await rig.cleanup()


@pytest.mark.redis
async def test_a_forget_during_the_run_means_nothing_is_written(rig: Rig) -> None:
    for n in range(8):
        await rig.turn("ada", f"secret plan {n}", T0)
    summariser = rig.summariser()
    original = rig.provider.complete

    async def forget_meanwhile(request: LLMRequest) -> LLMResponse:
        """Ada says /forget while the model writes (the tombstone is what /forget leaves)."""
        at = T0 + timedelta(seconds=1)
        await rig.memory.store.forget([forgotten(("discord", rig.id("ada")), at)], person=None)
        return await original(request)

    rig.provider.complete = forget_meanwhile  # type: ignore[method-assign]
    assert await summariser.run_once(T0) == [(str(rig.conv), "forgotten")]
    assert await rig.summaries() == ()
    assert await rig.held() == 16  # nothing consumed: the next run sees what is left


@pytest.mark.redis
async def test_a_spent_budget_or_an_outage_keeps_the_lines_for_later(
    redis_client: Redis, key_tag: str
) -> None:
    rig = Rig(redis_client, key_tag, CHORUS_INSIGHTS_CHANNEL_DAILY_TOKENS=0)
    try:
        for n in range(8):
            await rig.turn("ada", f"l{n}", T0)
        assert await rig.summariser().run_once(T0) == [(str(rig.conv), "skipped_budget")]
        assert not rig.provider.requests and await rig.held() == 16
        assert await rig.summariser().run_once(T0) == []  # not again at once
    finally:
        await rig.cleanup()
    rig = Rig(redis_client, key_tag + "b")
    try:
        for n in range(8):
            await rig.turn("ada", f"l{n}", T0)
        rig.provider.script.append(
            ProviderUnavailable("down", provider="scripted", status=529, attempts=3)
        )
        assert await rig.summariser().run_once(T0) == [(str(rig.conv), "retry")]
        assert await rig.held() == 16 and await rig.summaries() == ()
        later = T0 + timedelta(minutes=6)
        assert await rig.summariser().run_once(later) == [(str(rig.conv), "summarised")]
    finally:
        await rig.cleanup()


@pytest.mark.redis
async def test_the_read_brings_summaries_and_notes_only_where_the_scope_keeps_them(
    rig: Rig,
) -> None:
    s = chan.Summary(day="2025-03-09", text="x", first=T0, last=T0)
    await rig.redis.set(keys.summary("sum", rig.conv), chan.dump_summaries([s]))
    await rig.redis.set(
        keys.summary("notes", rig.conv), chan.dump_community(chan.Community(mood="m"))
    )
    for community in (False, True):
        plan = chan.SummaryPlan(ttl_days=1, community=community)
        got = await read_summaries(rig.redis, rig.conv, plan)
        assert got.summaries == (s,)
        assert (got.community.mood if got.community else None) == ("m" if community else None)


@pytest.mark.redis
async def test_a_conversation_whose_history_is_gone_is_no_longer_due(rig: Rig) -> None:
    for n in range(8):
        await rig.turn("ada", f"l{n}", T0 - timedelta(days=1))
    await rig.history.clear(rig.conv)  # /reset (or the history's TTL): its lines go with it
    assert await rig.summariser().run_once(T0) == [(str(rig.conv), "no_history")]
    assert not rig.provider.requests
    assert not await rig.redis.exists(keys.summary("job", rig.conv))
    assert not await rig.redis.zcard(keys.summary_queue(rig.tag))


@pytest.mark.redis
async def test_a_history_keeps_lines_past_its_window_only_where_they_are_summarised(
    rig: Rig,
) -> None:
    entry = HistoryEntry(role="user", text="x", message_id="m", author_id=rig.id("ada"))
    for keep in (True, False):
        async with rig.redis.pipeline(transaction=True) as pipe:
            for _ in range(15):
                rig.history.queue_append(pipe, rig.conv, entry, keep=keep)
            await pipe.execute()
        assert await rig.held() == (15 if keep else 10)
        assert len(await rig.history.load(rig.conv)) == 10  # the prompt reads the window only
        await rig.history.clear(rig.conv)


@pytest.mark.redis
async def test_summarised_lines_leave_the_history_once_out_of_its_window(rig: Rig) -> None:
    for n in range(5):  # 10 lines, all in the window
        await rig.turn("ada", f"day one {n}", T0 - timedelta(days=1))
    await rig.summariser().run_once(T0)  # the day is over: all ten summarised, all kept
    assert await rig.held() == 10
    for n in range(3):
        await rig.turn("ada", f"today {n}", T0)
    assert await rig.held() == 16  # six summarised lines slid past the window
    assert await rig.summariser().run_once(T0 + timedelta(days=1)) == [
        (str(rig.conv), "summarised")
    ]
    assert await rig.held() == 10  # the summarised ones left; the window stays whole
    assert [s.lines for s in await rig.summaries()] == [10, 6]


@pytest.mark.redis
async def test_the_schedule_rides_with_the_activity_record_or_when_lines_wait(rig: Rig) -> None:
    due = keys.summary_queue(rig.tag)

    async def record(*, waiting: bool, touch: bool) -> float | None:
        due_now = chan.due(
            rig.conv, rig.plan, T0, waiting=waiting, touch=touch, ttl_seconds=60, queue=rig.tag
        )
        await RedisTurnStore(rig.redis).write(TurnChanges(summary=due_now))
        score = await rig.redis.zscore(due, str(rig.conv))
        return None if score is None else float(score)

    assert await record(waiting=False, touch=False) is None  # a busy chat's turn: no command
    assert not await rig.redis.exists(keys.summary("job", rig.conv))
    assert await record(waiting=False, touch=True) == chan.next_day_due(T0).timestamp() * 1000
    assert await rig.redis.hgetall(keys.summary("job", rig.conv)) == {"ttl": "30", "community": "0"}
    assert await record(waiting=True, touch=False) == T0.timestamp() * 1000  # due now (LT)
    assert await record(waiting=False, touch=True) == T0.timestamp() * 1000  # never later


@pytest.mark.redis
async def test_the_insights_worker_runs_the_summary_pass(rig: Rig) -> None:
    from insights.worker import InsightsWorker

    for n in range(8):
        await rig.turn("ada", f"line {n}", T0)
    worker = InsightsWorker(
        rig.redis,
        rig.provider,
        "cheap",
        rig.history,
        rig.memory,
        rig.settings,
        clock=lambda: T0,
        queue=rig.tag,
    )
    assert await worker.run_once(T0) == []  # no user analysis was queued here
    assert worker.summarised == 1 and len(await rig.summaries()) == 1
    await worker.run_once(T0)
    assert worker.summarised == 0  # nothing due until the day ends: a drain stops here
    off = MemorySettings.model_validate({"CHORUS_SUMMARIES": False})
    assert (
        InsightsWorker(rig.redis, rig.provider, "m", rig.history, rig.memory, off).summariser
        is None
    )


@pytest.mark.redis
async def test_a_message_deleted_on_its_platform_is_never_summarised(rig: Rig) -> None:
    await rig.turn("ada", "a line she deleted", T0 - timedelta(days=1))
    await rig.turn("bo", "a line that stays", T0 - timedelta(days=1))
    await rig.history.delete_message(rig.conv, f"{rig.tag}-1")
    await rig.summariser().run_once(T0)
    (day,) = await rig.summaries()
    assert "stays" in day.text and "deleted" not in day.text and day.users == (rig.id("bo"),)


@pytest.mark.redis
async def test_the_lines_kept_past_the_window_are_capped(rig: Rig) -> None:
    entry = HistoryEntry(role="user", text="x", message_id="m", author_id=rig.id("ada"))
    async with rig.redis.pipeline(transaction=True) as pipe:
        rig.history.queue_append(pipe, rig.conv, *[entry] * (chan.KEEP_PAST_WINDOW + 50))
        await pipe.execute()
    assert await rig.held() == 10 + chan.KEEP_PAST_WINDOW == 370


@pytest.mark.redis
async def test_an_invalid_summary_consumes_nothing(rig: Rig) -> None:
    for n in range(8):
        await rig.turn("ada", f"l{n}", T0)
    rig.provider.script.extend(["not json", "still not json"])
    assert await rig.summariser().run_once(T0) == [(str(rig.conv), "invalid")]
    assert await rig.held() == 16 and await rig.summaries() == ()
    later = T0 + timedelta(minutes=6)
    assert await rig.summariser().run_once(later) == [(str(rig.conv), "summarised")]


@pytest.mark.redis
async def test_the_last_line_summarised_stays_as_the_anchor_of_the_next_run(rig: Rig) -> None:
    for n in range(5):
        await rig.turn("ada", f"yesterday {n}", T0 - timedelta(days=1))
    await rig.summariser().run_once(T0)  # all ten summarised; the last is the mark
    for n in range(5):
        await rig.turn("ada", f"today {n}", T0)  # the mark is now just past the window
    rig.clock = T0 + timedelta(days=1)
    await rig.redis.zadd(keys.summary_queue(rig.tag), {str(rig.conv): 0})  # due at once
    await rig.summariser().run_once(T0)  # today's lines are in the window: nothing ready
    assert await rig.held() == 11  # the window, and the mark past it (the rest left)
    await rig.summariser().run_once(rig.clock)
    today = [s for s in await rig.summaries() if s.day == "2025-03-10"]
    assert [s.lines for s in today] == [10] and "today 0" in today[0].text
