"""Done when (issue 19): a fact said in a channel 60 messages and two simulated days ago reaches
the prompt when asked about -- with the lexical fallback (no embedding model), and asked with a
paraphrase sharing no word with it on a loopback embedding server.

``chorus run`` as a real process on a real Redis: the Discord adapter against its loopback
gateway and REST, the Anthropic SDK against its loopback server, the in-process insights worker
summarising. Days are simulated the way Discord dates a message: a message's time is in its
snowflake id, so the fact is sent with an id of two days ago and the 60 messages after it with
ids of yesterday; nothing sleeps or patches a clock. The history keeps 40 lines (20 turns), so
when the question comes the fact is long out of it: only its summary can bring it back."""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from bot.events import ConversationKey, utcnow
from bot.memory import summaries as chan
from bot.memory.buffers import MemorySettings
from bot.memory.summaries_context import summaries_block
from bot.memory.vectors import text_id
from bot.state import connect, keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import BOT_ID, CHANNEL_ID, DiscordServer, bot_mention
from tests.loopback.discord_server import plain_message as discord_message
from tests.loopback.openai_server import OpenAIServer
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_forget_streams_e2e import person, posted

CONV = ConversationKey(platform="discord", channel=str(CHANNEL_ID))
DISCORD_EPOCH_MS = 1_420_070_400_000
FACT = "Heads up: the meetup moved to the Blue Lagoon cafe, Friday at 7pm."
_LINE = re.compile(r'<line from="([^"]*)" at="[^"]*">([^<]*)</line>')


def snowflake(moment: datetime, sequence: int) -> int:
    """A Discord id dated ``moment`` (discord.py reads ``created_at`` from it)."""
    return ((int(moment.timestamp() * 1000) - DISCORD_EPOCH_MS) << 22) | (sequence & 0x3FFFFF)


def model(body: dict[str, Any]) -> Any:
    """The chat model answers briefly; the insights model's summary quotes the day's user lines
    (a deterministic stand-in for a real summary); a pin analysis proposes nothing."""
    if "output_config" not in body:
        return "Noted."
    text = json.dumps(body["messages"]).replace('\\"', '"')
    if "You keep the memory of a chat." not in json.dumps(body.get("system", "")):
        return json.dumps({"pins": [], "recommendations": []})
    said = " / ".join(f"{who} said: {words}" for who, words in _LINE.findall(text))
    return json.dumps({"summary": said[:600]})


async def _clean(url: str, user_id: int, ids: list[int]) -> None:
    redis = await connect.open_redis(url)
    try:
        doomed = [keys.history(CONV)] + [keys.summary(k, CONV) for k in summary_kinds()]
        doomed += [keys.dedupe("discord", str(i)) for i in ids]
        doomed += [k async for k in redis.scan_iter(match=f"chorus:v1:user:discord:{user_id}:*")]
        doomed.append(keys.insights_job("discord", str(user_id)))
        await redis.delete(*doomed)
        await redis.zrem(keys.summary_queue(), str(CONV))
        member = keys.insights_member("discord", str(user_id))
        await redis.zrem(keys.insights_due(), member)
        await redis.zrem(keys.insights_deadline(), member)
    finally:
        await redis.aclose()


def summary_kinds() -> tuple[str, ...]:
    return keys.SUMMARY_KINDS


async def _summaries(url: str) -> tuple[chan.Summary, ...]:
    redis = await connect.open_redis(url)
    try:
        return chan.load_summaries(await redis.get(keys.summary("sum", CONV)))
    finally:
        await redis.aclose()


async def converse(
    tmp_path: Path,
    url: str,
    key_tag: str,
    fact: str,
    mark: str,
    question: str,
    env: dict[str, str],
    ready: Callable[[Redis, tuple[chan.Summary, ...]], Awaitable[bool]] | None = None,
) -> tuple[list[Any], tuple[chan.Summary, ...]]:
    """``fact`` two days ago, 60 filler messages yesterday, then (once the fact's day has a
    summary with ``mark`` in it and ``ready`` holds) ``question``: the last chat request's messages, and the
    summaries as they were when the question was asked."""
    ada = 10**17 + int(key_tag[1:], 16) % 10**9  # a snowflake-like user id unique to this run
    now = utcnow()
    # Noon of yesterday (UTC days, as summaries are kept), whatever the hour the test runs at:
    # "a day ago" counted in hours lands on the fact's own day in the small hours.
    yesterday = now.replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=1)
    said = [(yesterday - timedelta(days=1), fact)]
    said += [(yesterday + timedelta(minutes=n), f"filler {n}") for n in range(60)]
    ids = [snowflake(at, int(key_tag[1:7], 16) + n) for n, (at, _) in enumerate(said)]
    question_id = snowflake(now, int(key_tag[1:7], 16) + 99)
    await _clean(url, ada, [*ids, question_id])
    async with AnthropicServer() as llm, DiscordServer() as discord:
        llm.default_reply = model
        env = (
            base_env(tmp_path)
            | {
                "CHORUS_MODEL": "anthropic:claude-test",
                "ANTHROPIC_API_KEY": "k",
                "ANTHROPIC_BASE_URL": llm.base_url,
                "CHORUS_REDIS_URL": url,
                "CHORUS_INSIGHTS_POLL": "0.2",
                "DISCORD_TOKEN": "loopback-token-not-secret",
                "DISCORD_API_BASE_URL": discord.api_url,
                "DISCORD_GATEWAY_URL": discord.ws_url,
                "PYTHONPATH": str(ROOT),
            }
            | env
        )
        proc = await spawn_chorus(["run"], env, tmp_path)
        redis = await connect.open_redis(url)
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)  # IDENTIFY
            for n, (message_id, (_, text)) in enumerate(zip(ids, said, strict=True)):
                payload = discord_message(
                    message_id,
                    f"<@{BOT_ID}> {text}",
                    author=person(ada, "ada"),
                    mentions=[bot_mention()],
                )
                await discord.dispatch("MESSAGE_CREATE", payload)
                await discord.wait_for(posted(discord, n + 1), limit=90)
            # The summariser runs once 20 lines have left the 40-line history window.
            fact_day = None
            for _ in range(1000):  # up to 200 s on a loaded machine (pytest allows 300)
                summaries = await _summaries(url)
                fact_day = {s.day: s for s in summaries}.get(chan.day_of(said[0][0]))
                known = fact_day is not None and mark in fact_day.text
                if known and (ready is None or await ready(redis, summaries)):
                    break
                await asyncio.sleep(0.2)
            else:
                raise AssertionError(f"no summary of the fact's day (or not ready): {summaries}")
            assert fact_day is not None and str(ada) in fact_day.users  # whose lines fed it

            ask = discord_message(
                question_id,
                f"<@{BOT_ID}> {question}",
                author=person(ada, "ada"),
                mentions=[bot_mention()],
            )
            await discord.dispatch("MESSAGE_CREATE", ask)
            await discord.wait_for(posted(discord, len(said) + 1), limit=90)
        except (AssertionError, TimeoutError) as failed:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            logs = [x for x in err.decode().splitlines() if "summar" in x or "embed" in x]
            raise AssertionError(f"{failed}\n" + "\n".join(logs[-40:])) from None
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
                _, err = await asyncio.wait_for(proc.communicate(), 60)
            await redis.aclose()
            await _clean(url, ada, [*ids, question_id])
        assert proc.returncode == 0, err.decode()[-3000:]
    chats = [b for b in llm.bodies if "output_config" not in b]
    return chats[-1]["messages"], summaries


def summaries_section(asked: list[Any], question: str, mark: str) -> str:
    """The ``<summaries>`` section of the asking turn; the fact (``mark``) left the history."""
    assert mark not in json.dumps(asked[:-1])
    tail = json.dumps(asked[-1])
    assert question in tail
    return tail[tail.index("<summaries") : tail.index("</summaries>")]


async def test_a_fact_said_60_messages_and_two_days_ago_reaches_the_prompt(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    question, mark = "Where is the meetup on Friday?", "Blue Lagoon"
    asked, _ = await converse(tmp_path, real_redis_url, key_tag, FACT, mark, question, {})
    section = summaries_section(asked, question, mark)
    assert "Blue Lagoon cafe, Friday at 7pm" in section  # ...and its summary brought it back


ALLERGY = "Reminder: Bob is allergic to peanuts, so keep them away from the buffet."
PARAPHRASE = "Any nut allergy worries for the snack table?"  # no word in common with ALLERGY


async def test_a_paraphrase_finds_the_fact_by_meaning_on_a_loopback_embedding_server(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    """The same, asked with a paraphrase sharing no word with the fact: the summariser stored
    the summaries' vectors (the loopback OpenAI embeddings endpoint, whose synonym table relates
    "nut allergy" and "allergic to peanuts"), so the hybrid score brings the summary back; the
    lexical score over the very same summaries does not."""
    model_name = "openai:text-embedding-3-small"

    dimensions = MemorySettings().embedding_dimensions  # part of the embedder's name
    named = f"{model_name}@{dimensions}" if dimensions else model_name

    async def embedded(redis: Redis, summaries: tuple[chan.Summary, ...]) -> bool:
        stored = set(await redis.hkeys(keys.summary("vec", CONV)))
        return {text_id(named, s.text) for s in summaries} <= stored

    async with OpenAIServer() as embeddings:
        env = {
            "CHORUS_EMBEDDING_MODEL": model_name,
            "OPENAI_API_KEY": "k",
            "OPENAI_BASE_URL": embeddings.base_url,
            "CHORUS_EMBEDDING_DEADLINE": "10",  # the most it may be: loopback is fast
        }
        asked, stored = await converse(
            tmp_path, real_redis_url, key_tag, ALLERGY, "Bob", PARAPHRASE, env, embedded
        )
        assert any(PARAPHRASE in str(inputs) for inputs in embeddings.embedded)  # the query
    section = summaries_section(asked, PARAPHRASE, "Bob is allergic")
    assert "Bob is allergic to peanuts" in section  # found by meaning
    lexical = summaries_block(stored, PARAPHRASE, MemorySettings())
    assert "filler" in lexical and "Bob" not in lexical  # words alone miss it
