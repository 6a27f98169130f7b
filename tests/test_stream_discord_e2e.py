"""Streamed answers on Discord, as users meet them: ``chorus run`` as real processes, discord.py
against the loopback gateway and REST stand-in, the Anthropic SDK against a loopback model that
writes 40 word-sized chunks 100 ms apart.

- One process: the answer is visible (a posted message, then edits) long before the model
  finished, the channel ends with exactly the messages an unstreamed reply sends (mention
  safety, the reply reference), and no 5-second window holds more than 5 message calls.
- Split over real Redis (``--role gateway`` + ``--role worker``): a worker SIGKILLed mid-stream
  leaves a half-written message; the worker that takes the turn over streams into the same
  message and its answer replaces the partial text. One answer, never two.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import prompts
from adapters.discord.convert import reply_to_outgoing
from bot.events import ConversationKey, Reply
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    HUMAN_ID,
    DiscordServer,
    bot_mention,
    plain_message,
)
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus

WORDS = 40
ANSWER = "Here is the answer for @everyone, written slowly: " + " ".join(
    f"w{i}" for i in range(WORDS - 9)
)
SECOND = "The worker that took over says this instead, " + " ".join(
    f"x{i}" for i in range(WORDS - 8)
)
DISCORD_RATE = (5, 5.0)


def final_contents(text: str, message_id: int) -> list[str]:
    """What an unstreamed reply to ``message_id`` posts (the adapter's own conversion)."""
    reply = Reply(
        conversation=ConversationKey(platform="discord", channel=str(CHANNEL_ID)),
        text=text,
        reply_to_id=str(message_id),
        addressed_user_ids=(str(HUMAN_ID),),
    )
    return [piece.content for piece in reply_to_outgoing(reply)]


def shown(discord: DiscordServer) -> list[str]:
    return [m["content"] for m in discord.channel_messages(CHANNEL_ID)]


def within_rate(discord: DiscordServer) -> bool:
    limit, period = DISCORD_RATE
    times = sorted(t for t, _, channel in discord.message_calls if channel == str(CHANNEL_ID))
    return all(sum(1 for u in times if t <= u < t + period) <= limit for t in times)


def discord_env(discord: DiscordServer) -> dict[str, str]:
    return {
        "DISCORD_TOKEN": "loopback-token-not-secret",
        "DISCORD_API_BASE_URL": discord.api_url,
        "DISCORD_GATEWAY_URL": discord.ws_url,
    }


def model_env(model: AnthropicServer) -> dict[str, str]:
    return {
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": model.base_url,
        "PYTHONPATH": str(ROOT),
        "CHORUS_INSIGHTS_ENABLED": "false",
    }


async def stop(proc: asyncio.subprocess.Process) -> bytes:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    _, err = await asyncio.wait_for(proc.communicate(), 60)
    return err


async def test_a_streamed_answer_shows_before_the_model_ends_and_ends_as_unstreamed(
    tmp_path: Path,
) -> None:
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.replies.append({"text": ANSWER, "chunk_delay": 0.1})
        env = base_env(tmp_path) | model_env(model) | discord_env(discord)
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)
            await discord.dispatch(
                "MESSAGE_CREATE",
                plain_message(4242, f"<@{BOT_ID}> tell me slowly", mentions=[bot_mention()]),
            )
            await discord.wait_for(lambda: any(shown(discord)), limit=90)
            early, chunks_then = shown(discord), len(model.chunk_times)
            expected = final_contents(ANSWER, 4242)
            await discord.wait_for(lambda: shown(discord) == expected, limit=60)
            await asyncio.sleep(1.5)  # (nothing may change it afterwards)
            assert shown(discord) == expected
        finally:
            err = await stop(proc)
        assert proc.returncode == 0, err.decode()[-3000:]
    assert chunks_then < WORDS, "the text was visible only once the model had finished"
    (first,) = early
    assert first != expected[0] and expected[0].startswith(first.rstrip(" ,:"))
    assert "@everyone" not in first  # drafts are neutralised like the answer
    assert len(discord.created) == 1, "one message, edited; never a second answer"
    (post,) = discord.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")
    assert post.body["message_reference"]["message_id"] == 4242
    assert post.body["allowed_mentions"] == {
        "parse": [],
        "users": [HUMAN_ID],
        "replied_user": True,
    }
    edits = [r for r in discord.requests if r.method == "PATCH"]
    assert len(edits) >= 2, "the answer grew by edits"
    assert within_rate(discord), discord.message_calls


async def test_a_worker_killed_mid_stream_leaves_one_answer(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.replies.extend(
            [{"text": ANSWER, "chunk_delay": 0.25}, {"text": SECOND, "chunk_delay": 0.05}]
        )
        common = base_env(tmp_path) | model_env(model)
        common |= {
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS": "redis",
            "CHORUS_BUS_NAMESPACE": key_tag,
        }
        gateway = await spawn_chorus(
            ["run", "--role", "gateway"], common | discord_env(discord), tmp_path
        )
        first = await spawn_chorus(["run", "--role", "worker"], common, tmp_path)
        second: asyncio.subprocess.Process | None = None
        message_id = int(key_tag[1:], 16)  # unique per run: the real Redis remembers ids
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)
            await discord.dispatch(
                "MESSAGE_CREATE",
                plain_message(message_id, f"<@{BOT_ID}> who answers?", mentions=[bot_mention()]),
            )
            await discord.wait_for(lambda: any(shown(discord)), limit=90)
            partial = shown(discord)
            first.kill()  # mid-stream: the model is still writing the first answer
            await first.wait()
            second = await spawn_chorus(["run", "--role", "worker"], common, tmp_path)
            expected = final_contents(SECOND, message_id)
            await discord.wait_for(lambda: shown(discord) == expected, limit=90)
        finally:
            errors = [await stop(p) for p in (gateway, second) if p is not None]
            if first.returncode is None:
                first.kill()
                await first.wait()
        assert all(b"Traceback" not in err for err in errors), errors
    (text,) = partial
    assert text != expected[0] and len(model.requests) == 2
    assert len(discord.created) == 1, "the takeover's answer replaced the partial message"
    assert within_rate(discord), discord.message_calls


async def test_a_blocked_word_mid_stream_never_reaches_discord(tmp_path: Path) -> None:
    """Every draft passes the outbound safety check before it is published: the words before
    a blocked one may show, the blocked word never does, and the answer ends withheld."""
    word = "zorblax"
    text = (
        "Some harmless words first, then " + word + " and " + " ".join(f"w{i}" for i in range(30))
    )
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.replies.append({"text": text, "chunk_delay": 0.1})
        env = base_env(tmp_path) | model_env(model) | discord_env(discord)
        env["CHORUS_MODERATION_WORDS"] = word
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)
            await discord.dispatch(
                "MESSAGE_CREATE",
                plain_message(4343, f"<@{BOT_ID}> say it", mentions=[bot_mention()]),
            )
            safe = prompts.render("safety/withheld")
            await discord.wait_for(lambda: shown(discord) == [safe], limit=90)
        finally:
            err = await stop(proc)
        assert proc.returncode == 0, err.decode()[-3000:]
    bodies = json.dumps([r.body for r in discord.requests])
    assert word not in bodies
    assert len(discord.created) == 1
