"""Summaries and community notes ranked by meaning (issue 19): the summariser stores their
vectors (``summ:vec``) off the reply path, the turn reads them in its one pipelined read, and a
paraphrase sharing no word with a summary finds it with the hybrid score but not lexically.
An embedding failure loses no summary; ``/forget`` drops the vectors with what it drops; the
insights worker embeds a user's new notes at once. Over both backends, with the loopback
embedder (its synonym table puts "nut allergy" near "allergic to peanuts")."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest
from redis.asyncio import Redis

from bot.app import Chorus
from bot.events import ConversationKey, utcnow
from bot.memory import summaries as chan
from bot.memory.buffers import MemorySettings
from bot.memory.summaries_context import community_block, summaries_block
from bot.memory.vectors import Recalled, store_vectors, text_id, unit
from bot.settings import settings_from
from bot.state import keys
from bot.state.insight_jobs import Budget
from bot.state.summaries import SummaryStore
from bot.state.vectors import VectorStore
from insights.summariser import Summariser
from insights.worker import JobOutcome
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.embedding_model import LoopbackEmbedder, embed_text
from tests.loopback.openai_server import OpenAIServer
from tests.roundtrips import counting_round_trips
from tests.test_insights_worker import DUE, add, answer
from tests.test_insights_worker import Rig as WorkerRig
from tests.test_memory_e2e import Console, last_chat_prompt, server, stop
from tests.test_summaries_contract import T0, Rig, rig
from tests.turn_rig import read_summaries

__all__ = ["rig", "server"]  # fixtures: the rig, the loopback Anthropic server

FACT = "Reminder: Bob is allergic to peanuts, so keep them away from the buffet."
PARAPHRASE = "any nut allergy worries for the snack table?"  # no word in common with FACT


def summariser(rig: Rig, embedder: LoopbackEmbedder) -> Summariser:
    budget = Budget(rig.redis, user_daily=10**9, channel_daily=10**9)
    return Summariser(
        rig.redis,
        rig.provider,
        "cheap",
        rig.settings,
        budget,
        history_max=rig.history.max_messages,
        clock=lambda: rig.clock,
        queue=rig.tag,
        embedder=embedder,
    )


async def said_two_days(rig: Rig) -> None:
    """The fact two days ago, then six filler turns yesterday (the most recent summary)."""
    await rig.turn("ada", FACT, T0 - timedelta(days=2))
    for n in range(6):
        await rig.turn("ada", f"filler {n}", T0 - timedelta(days=1))
    rig.clock = T0


def query(text: str, embedder: LoopbackEmbedder) -> Recalled:
    return Recalled(embedder.name, unit(embed_text(text)))


async def read(rig: Rig, plan: chan.SummaryPlan) -> chan.ChannelMemory:
    return await read_summaries(rig.redis, rig.conv, plan, vectors=True)


@pytest.mark.redis
async def test_summaries_and_notes_are_embedded_and_a_paraphrase_finds_them(
    redis_client: Redis, key_tag: str
) -> None:
    rig = Rig(redis_client, key_tag)
    rig.plan = chan.SummaryPlan(ttl_days=7, community=True)
    embedder = LoopbackEmbedder()
    try:
        await said_two_days(rig)
        assert await summariser(rig, embedder).run_once(T0) == [(str(rig.conv), "summarised")]
        memory = await read(rig, rig.plan)
        assert memory.community is not None
        texts = [s.text for s in memory.summaries] + [n.text for n in memory.community.notes]
        assert len(memory.summaries) == 2 and len(texts) == 3
        assert set(memory.vectors) == {text_id(embedder.name, t) for t in texts}
        ttl = await redis_client.ttl(keys.summary("vec", rig.conv))
        assert 6 * 86400 < ttl <= 7 * 86400  # the summaries' TTL
        settings = rig.settings
        recall = query(PARAPHRASE, embedder)
        hybrid = summaries_block(memory.summaries, PARAPHRASE, settings, recall, memory.vectors)
        lexical = summaries_block(memory.summaries, PARAPHRASE, settings)
        assert "allergic to peanuts" in hybrid and "filler 5" in hybrid  # + the latest day
        assert "allergic to peanuts" not in lexical and "filler 5" in lexical
        # No query vector (no model, or it missed its deadline): lexical, vectors or not.
        late = Recalled(embedder.name, None)
        assert summaries_block(memory.summaries, PARAPHRASE, settings, late, memory.vectors) == (
            lexical
        )
        # The notes too (the scripted note quotes the first line: the fact).
        notes = community_block(memory.community, "peanut", settings, recall, memory.vectors)
        assert "allergic to peanuts" in notes
        # A second run with nothing new embeds nothing again.
        calls = len(embedder.calls)
        await summariser(rig, embedder).embed(rig.conv, 7)
        assert len(embedder.calls) == calls
    finally:
        await rig.cleanup()


@pytest.mark.redis
async def test_an_embedding_failure_keeps_the_summary_and_the_next_run_embeds_it(
    rig: Rig,
) -> None:
    embedder = LoopbackEmbedder()
    embedder.fail = RuntimeError("embedding endpoint down")
    await said_two_days(rig)
    assert await summariser(rig, embedder).run_once(T0) == [(str(rig.conv), "summarised")]
    kept = await rig.summaries()
    assert any(FACT in s.text for s in kept)  # nothing lost...
    assert not await rig.redis.exists(keys.summary("vec", rig.conv))  # ...only its vector
    lexical = summaries_block(kept, "who is allergic to peanuts?", rig.settings)
    assert FACT.split(":")[1].strip() in lexical  # words still find it
    embedder.fail = None
    await rig.turn("ada", "one more", T0)  # the next run (nothing ready) embeds what lacks one
    await rig.redis.zadd(keys.summary_queue(rig.tag), {str(rig.conv): 0})
    assert await summariser(rig, embedder).run_once(T0) == [(str(rig.conv), "nothing_ready")]
    stored = await rig.redis.hkeys(keys.summary("vec", rig.conv))
    assert set(stored) == {text_id(embedder.name, s.text) for s in kept}


@pytest.mark.redis
async def test_forget_drops_the_vectors_with_the_summaries(rig: Rig) -> None:
    embedder = LoopbackEmbedder()
    await rig.turn("ada", FACT, T0 - timedelta(days=2))
    for n in range(6):
        await rig.turn("bo", f"bo line {n}", T0 - timedelta(days=1))
    rig.clock = T0
    await summariser(rig, embedder).run_once(T0)
    assert len(await rig.redis.hkeys(keys.summary("vec", rig.conv))) == 2
    gone = await chan.forget_user(SummaryStore(rig.redis), "discord", rig.id("ada"), [rig.conv])
    assert gone.summaries == 1
    assert not await rig.redis.exists(keys.summary("vec", rig.conv))  # her summary's too
    (left,) = await rig.summaries()
    await rig.redis.zadd(keys.summary_queue(rig.tag), {str(rig.conv): 0})
    await summariser(rig, embedder).run_once(T0)  # what is left is embedded again
    stored = await rig.redis.hkeys(keys.summary("vec", rig.conv))
    assert stored == [text_id(embedder.name, left.text)]


@pytest.mark.redis
async def test_summary_vectors_ride_in_the_one_read_of_an_answered_turn(
    redis_url: str, key_tag: str, server: AnthropicServer
) -> None:
    """With an embedding model the turn still makes two round trips, and the summary found by
    meaning only reaches the prompt."""
    async with OpenAIServer() as embeddings:
        settings = settings_from(
            {
                "CHORUS_MODEL": "anthropic:claude-test",
                "ANTHROPIC_API_KEY": "k",
                "ANTHROPIC_BASE_URL": server.base_url,
                "CHORUS_REDIS_URL": redis_url,
                "CHORUS_EMBEDDING_MODEL": "openai:text-embedding-3-small",
                "OPENAI_API_KEY": "k",
                "OPENAI_BASE_URL": embeddings.base_url,
                "CHORUS_EMBEDDING_DEADLINE": "10",  # generous on a loaded machine
            }
        )
        app = await Chorus.from_settings(settings)
        await app.start()
        console = Console(app, key_tag)
        listener = asyncio.create_task(console.listen())
        ada = f"ada-{key_tag}"
        conv = ConversationKey(platform="console", channel=ada)
        try:
            await console.say("ada", "warm-up")
            at = utcnow() - timedelta(days=2)
            summary = chan.Summary(
                day=chan.day_of(at), text=FACT, users=(ada,), first=at, last=at, lines=2
            )
            latest = chan.Summary(
                day=chan.day_of(at + timedelta(days=1)), text="small talk", first=at, last=at
            )
            await app.redis.set(keys.summary("sum", conv), chan.dump_summaries([summary, latest]))
            recall = app.recall.recall
            assert recall.embedder is not None
            key = keys.summary("vec", conv)
            texts = [FACT, "small talk"]
            await store_vectors(
                VectorStore(app.redis), recall.embedder, key, texts, ttl_seconds=3600
            )
            with counting_round_trips() as trips:
                await console.say("ada", PARAPHRASE)
            assert len(trips.turn) == 2, [w[:80] for w in trips.turn]  # no extra round trip
            assert "allergic to peanuts" in last_chat_prompt(server)
        finally:
            await stop(console, listener)
            await app.redis.delete(keys.summary("sum", conv), keys.summary("vec", conv))
            await app.redis.zrem(keys.summary_queue(), str(conv))


@pytest.mark.redis
async def test_the_insights_worker_embeds_a_users_new_notes_at_once(
    redis_client: Redis, key_tag: str
) -> None:
    """Their next turn then ranks them by meaning without waiting for a background refresh;
    a failing embedder loses no note (that refresh still catches them)."""
    rig = WorkerRig(redis_client, key_tag, MemorySettings())
    embedder = LoopbackEmbedder()
    await rig.say(rig.alice, "I went vegan last year", "a1")
    rig.provider.script.append(answer([add("Is vegan", "L1")]))
    assert await rig.worker(embedder=embedder).run_once(DUE) == [
        (f"discord:{rig.alice}", JobOutcome.MERGED)
    ]
    stored = await redis_client.hgetall(keys.user_vectors("discord", rig.alice))
    assert set(stored) == {text_id(embedder.name, "Is vegan")}
    assert await redis_client.ttl(keys.user_vectors("discord", rig.alice)) > 0
    embedder.fail = RuntimeError("down")
    await rig.say(rig.bob, "I play the violin", "b1", at=DUE)
    rig.provider.script.append(answer([add("Plays violin", "L3")]))
    later = DUE + timedelta(hours=1)
    assert await rig.worker(embedder=embedder).run_once(later) == [
        (f"discord:{rig.bob}", JobOutcome.MERGED)
    ]
    assert await rig.pins(rig.bob) == ["Plays violin"]
    assert not await redis_client.exists(keys.user_vectors("discord", rig.bob))
