"""The turn store's contract (``bot.state.turn``), held by every implementation: the in-memory
twin, and ``RedisTurnStore`` on the embedded store and a real Redis (``turn_store``).

A turn reads what its query names and writes what its changes say, with the same rules
everywhere: the history window and what is kept past it for the summariser, memory read through
a ``/link`` alias, "later wins" for an insights job's due time and "first wins" for its
deadline, "earlier wins" for a summary's, counters that add up, a cost reservation settled (its
hold gone, the real cost spent), recent conversations pruned to their window and capped, and a
guarded step that writes only while the claim holds its token.
Setting up and looking at a store is what a test does and a turn never does, so ``Peek`` does it
per implementation; everything else goes through the store's own methods.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import cast

from bot.events import ConversationKey
from bot.state import keys
from bot.state.claims import DONE
from bot.state.engagement import Changes
from bot.state.history import HistoryEntry
from bot.state.memory_turn import MemoryTurnStore
from bot.state.turn import (
    Activity,
    ChannelSave,
    ClaimTake,
    CostSettle,
    CounterAdd,
    HistoryAppend,
    InsightDue,
    Record,
    Release,
    Renew,
    StreamAppend,
    SummaryDue,
    TurnChanges,
    TurnQuery,
)
from tests.turn_rig import WINDOW, Store, redis_of

T0 = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)


class Peek:
    """What a test puts into or reads out of a store, by implementation."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.twin = store if isinstance(store, MemoryTurnStore) else None

    async def put_memory(self, who: tuple[str, str], raw: str, person: str | None = None) -> None:
        if self.twin is not None:
            if person is None:
                self.twin.buffers[who] = raw
            else:
                self.twin.aliases[who] = person
                self.twin.people[person] = raw
            return
        redis = redis_of(self.store)
        if person is None:
            await redis.set(keys.memory(*who), raw)
        else:
            await redis.set(keys.person_of(*who), person)
            await redis.set(keys.person_memory(person), raw)

    async def put_summaries(self, conv: ConversationKey, text: str, notes: str) -> None:
        if self.twin is not None:
            self.twin.summaries[conv], self.twin.community[conv] = text, notes
            self.twin.summary_vectors[conv] = {"v1": "abc"}
            return
        redis = redis_of(self.store)
        await redis.set(keys.summary("sum", conv), text)
        await redis.set(keys.summary("notes", conv), notes)
        await redis.hset(keys.summary("vec", conv), mapping={"v1": "abc"})

    async def conversations(self, who: tuple[str, str]) -> dict[str, int]:
        if self.twin is not None:
            return {str(c): at for c, at in self.twin.conversations.get(who, {}).items()}
        found = await redis_of(self.store).zrange(
            keys.user_conversations(*who), 0, -1, withscores=True
        )
        return {str(c): int(at) for c, at in cast("list[tuple[str, float]]", found)}

    async def insight(self, queue: str, who: tuple[str, str]) -> tuple[int, str, int, int]:
        """(rev, name, due ms, deadline ms) of the user's job."""
        if self.twin is not None:
            job = self.twin.insight_jobs[(queue, *who)]
            return job.rev, job.name, job.due_ms, job.deadline_ms or 0
        redis, member = redis_of(self.store), keys.insights_member(*who)
        fields = await redis.hgetall(keys.insights_job(*who, queue))
        due = await redis.zscore(keys.insights_due(queue), member)
        deadline = await redis.zscore(keys.insights_deadline(queue), member)
        return int(fields["rev"]), str(fields["name"]), int(due or 0), int(deadline or 0)

    async def summary_due(self, queue: str, conv: ConversationKey) -> int | None:
        if self.twin is not None:
            return self.twin.summary_due.get((queue, conv))
        score = await redis_of(self.store).zscore(keys.summary_queue(queue), str(conv))
        return None if score is None else int(score)

    async def counter(self, key: str, field: str | None) -> int:
        if self.twin is not None:
            return self.twin.counters.get((key, field), 0)
        redis = redis_of(self.store)
        value = await (redis.get(key) if field is None else redis.hget(key, field))
        return int(value or 0)

    async def put_hold(self, key: str, hold: str, value: str) -> None:
        if self.twin is not None:
            self.twin.holds.setdefault(key, {})[hold] = value
            return
        await redis_of(self.store).hset(key, hold, value)

    async def holds(self, key: str) -> dict[str, str]:
        if self.twin is not None:
            return dict(self.twin.holds.get(key, {}))
        found = await redis_of(self.store).hgetall(key)
        return {str(k): str(v) for k, v in cast("dict[str, str]", found).items()}

    async def stream(self, name: str) -> list[dict[str, str]]:
        if self.twin is not None:
            return self.twin.streams.get(name, [])
        found = await redis_of(self.store).xrange(name)
        return [dict(fields) for _, fields in cast("list[tuple[str, dict[str, str]]]", found)]


def conv_of(tag: str, name: str = "c") -> ConversationKey:
    return ConversationKey(platform="discord", channel=f"{name}-{tag}")


def lines(tag: str, count: int, start: int = 0) -> tuple[HistoryEntry, ...]:
    return tuple(
        HistoryEntry(role="user", text=f"line {n}", message_id=f"m{n}-{tag}", author_id="u")
        for n in range(start, start + count)
    )


async def test_an_unknown_turn_reads_empty(turn_store: Store, key_tag: str) -> None:
    conv = conv_of(key_tag)
    state = await turn_store.read(
        TurnQuery(conv, "discord", f"u-{key_tag}", memory_refresh=0, summaries=True)
    )
    assert (state.claimed, state.history, state.waiting) == (None, [], False)
    assert (state.person, state.memory, state.summaries, state.community) == (None,) * 4
    assert state.knowledge_version == 0 and not state.user_vectors


async def test_the_read_takes_the_claim_first(turn_store: Store, key_tag: str) -> None:
    conv, key = conv_of(key_tag), keys.dedupe("discord", f"m-{key_tag}")
    first = await turn_store.read(TurnQuery(conv, "discord", "u", ClaimTake(key, "a", 10_000)))
    again = await turn_store.read(TurnQuery(conv, "discord", "u", ClaimTake(key, "b", 10_000)))
    assert (first.claimed, again.claimed) == (None, "a")
    assert 0 < await turn_store.remaining_ms(key) <= 10_000


async def test_the_history_keeps_its_window_and_what_waits_for_the_summariser(
    turn_store: Store, key_tag: str
) -> None:
    conv, trimmed = conv_of(key_tag), conv_of(key_tag, "trimmed")
    await turn_store.write(TurnChanges(history=HistoryAppend(conv, lines(key_tag, 44), keep=True)))
    state = await turn_store.read(TurnQuery(conv, "discord", "u"))
    assert [e.text for e in state.history] == [f"line {n}" for n in range(4, 44)]
    assert not state.waiting, "44 lines: 4 past the window, fewer than the 5 it looks for"
    await turn_store.write(TurnChanges(history=HistoryAppend(conv, lines(key_tag, 1, 44), True)))
    state = await turn_store.read(TurnQuery(conv, "discord", "u"))
    assert state.waiting and len(state.history) == WINDOW

    await turn_store.write(TurnChanges(history=HistoryAppend(trimmed, lines(key_tag, 45))))
    state = await turn_store.read(TurnQuery(trimmed, "discord", "u"))
    assert not state.waiting, "a scope without summaries keeps only the window"
    assert state.history[0].text == "line 5"


async def test_memory_is_read_through_a_link(turn_store: Store, key_tag: str) -> None:
    peek, conv = Peek(turn_store), conv_of(key_tag)
    own, linked = ("discord", f"ada-{key_tag}"), ("discord", f"bob-{key_tag}")
    await peek.put_memory(own, '{"own": 1}')
    await peek.put_memory(linked, '{"person": 1}', person=f"p-{key_tag}")
    state = await turn_store.read(TurnQuery(conv, *own, memory_refresh=60))
    assert (state.person, state.memory) == (None, '{"own": 1}')
    state = await turn_store.read(TurnQuery(conv, *linked, memory_refresh=60))
    assert (state.person, state.memory) == (f"p-{key_tag}", '{"person": 1}')
    assert (await turn_store.read(TurnQuery(conv, *linked))).memory is None, "memory off"


async def test_summaries_notes_and_vectors_are_read_only_when_asked(
    turn_store: Store, key_tag: str
) -> None:
    peek, conv = Peek(turn_store), conv_of(key_tag)
    await peek.put_summaries(conv, "[summaries]", "{notes}")
    bare = await turn_store.read(TurnQuery(conv, "discord", "u", summaries=True))
    assert (bare.summaries, bare.community, dict(bare.summary_vectors)) == ("[summaries]", None, {})
    full = await turn_store.read(
        TurnQuery(conv, "discord", "u", summaries=True, community=True, summary_vectors=True)
    )
    assert (full.community, dict(full.summary_vectors)) == ("{notes}", {"v1": "abc"})


async def test_activity_keeps_the_recent_conversations_within_window_and_cap(
    turn_store: Store, key_tag: str
) -> None:
    peek, who = Peek(turn_store), ("discord", f"ada-{key_tag}")

    def seen(name: str, minutes: int) -> TurnChanges:
        at = T0 + timedelta(minutes=minutes)
        return TurnChanges(activity=Activity(*who, conv_of(key_tag, name), at, 60, 3600, 2))

    for name, minutes in (("old", 0), ("a", 30), ("b", 65), ("c", 70)):
        await turn_store.write(seen(name, minutes))
    kept = await peek.conversations(who)
    assert set(kept) == {str(conv_of(key_tag, "b")), str(conv_of(key_tag, "c"))}, kept
    assert kept[str(conv_of(key_tag, "c"))] == int((T0 + timedelta(minutes=70)).timestamp())


async def test_an_insights_job_is_pushed_later_by_each_turn_but_never_past_its_deadline(
    turn_store: Store, key_tag: str
) -> None:
    peek, who, conv = Peek(turn_store), ("discord", f"ada-{key_tag}"), conv_of(key_tag)

    def turn(name: str, due: int, deadline: int) -> TurnChanges:
        job = InsightDue(*who, name, conv, '{"m": 1}', due, deadline, 600, key_tag, "c:")
        return TurnChanges(insight=job)

    await turn_store.write(turn("Ada", 1_000, 5_000))
    await turn_store.write(turn("Ada L.", 3_000, 9_000))
    await turn_store.write(turn("Ada L.", 2_000, 9_000))  # an older turn's commit, retried
    assert await peek.insight(key_tag, who) == (3, "Ada L.", 3_000, 5_000)


async def test_a_summary_is_due_at_the_earliest_time_asked(turn_store: Store, key_tag: str) -> None:
    peek, conv = Peek(turn_store), conv_of(key_tag)
    assert await peek.summary_due(key_tag, conv) is None
    for due in (9_000, 4_000, 6_000):
        await turn_store.write(TurnChanges(summary=SummaryDue(conv, key_tag, due, 3, True, 60)))
    assert await peek.summary_due(key_tag, conv) == 4_000


async def test_usage_counters_add_up(turn_store: Store, key_tag: str) -> None:
    peek, hashed, plain = Peek(turn_store), f"usage-{key_tag}", f"cost-{key_tag}"
    for _ in range(3):
        await turn_store.write(
            TurnChanges(usage=(CounterAdd(hashed, "t", 7, 60), CounterAdd(plain, None, 2, 60)))
        )
    assert (await peek.counter(hashed, "t"), await peek.counter(plain, None)) == (21, 6)


async def test_a_settled_cost_drops_its_hold_and_adds_the_real_cost(
    turn_store: Store, key_tag: str
) -> None:
    peek, spent, holds = Peek(turn_store), f"cost-{key_tag}", f"holds-{key_tag}"
    await peek.put_hold(holds, "discord:m1", "5000 1e12")
    await peek.put_hold(holds, "discord:m2", "7000 1e12")
    await turn_store.write(TurnChanges(cost=CostSettle(spent, holds, "discord:m1", 1234, 60)))
    await turn_store.write(TurnChanges(cost=CostSettle(spent, holds, "discord:m9", 0, 60)))
    assert await peek.holds(holds) == {"discord:m2": "7000 1e12"}, "only the settled hold goes"
    assert await peek.counter(spent, None) == 1234, "the real cost, not the reservation"


async def test_a_live_channels_decision_reaches_its_store(turn_store: Store, key_tag: str) -> None:
    conv, now = conv_of(key_tag), T0.timestamp()
    changes = Changes(paused=True, pause_at=now, users={"u1": now}, answered={"m1": now})
    await turn_store.write(TurnChanges(channel=ChannelSave(conv, changes, now)))
    snapshot = await turn_store.channels.load(conv, now=now, users_since=now - 10)
    assert snapshot.paused and dict(snapshot.users) == {"u1": now}
    assert snapshot.answered == ("m1",)


async def test_a_guarded_step_runs_only_while_the_claim_holds_its_token(
    turn_store: Store, key_tag: str
) -> None:
    peek, conv = Peek(turn_store), conv_of(key_tag)
    key, stream = keys.dedupe("discord", f"m-{key_tag}"), f"replies-{key_tag}"
    reply = TurnChanges(
        reply=StreamAppend(stream, {"e": "hi"}, maxlen=100),
        history=HistoryAppend(conv, lines(key_tag, 1)),
    )
    assert not await turn_store.if_holds(key, "a", Record(reply, 60)), "nobody holds it"
    assert await turn_store.take(key, "a", 300) is None
    assert not await turn_store.if_holds(key, "b", Record(reply, 60)), "not b's"
    assert (
        await peek.stream(stream) == []
        and not (await turn_store.read(TurnQuery(conv, "discord", "u"))).history
    )

    assert await turn_store.if_holds(key, "a", Renew(60_000))
    assert await turn_store.remaining_ms(key) > 300
    assert await turn_store.if_holds(key, "a", Record(reply, 60))
    assert await peek.stream(stream) == [{"e": "hi"}]
    assert len((await turn_store.read(TurnQuery(conv, "discord", "u"))).history) == 1
    assert await turn_store.take(key, "b", 300) == DONE
    assert not await turn_store.if_holds(key, "a", Release()), "done is nobody's token"


async def test_a_released_claim_is_gone(turn_store: Store, key_tag: str) -> None:
    key = keys.dedupe("discord", f"m-{key_tag}")
    await turn_store.take(key, "a", 60_000)
    assert await turn_store.if_holds(key, "a", Release())
    assert await turn_store.remaining_ms(key) == -2
    assert await turn_store.take(key, "b", 60_000) is None


async def test_a_lease_lapses_by_itself(turn_store: Store, key_tag: str) -> None:
    key = keys.dedupe("discord", f"m-{key_tag}")
    await turn_store.take(key, "a", 50)
    for _ in range(100):  # up to 5 s on a loaded machine
        if await turn_store.take(key, "b", 60_000) is None:
            break
        await asyncio.sleep(0.05)
    else:
        raise AssertionError("the lease never lapsed")
    assert not await turn_store.if_holds(key, "a", Renew(60_000))
