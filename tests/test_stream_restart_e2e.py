"""Done when (issue 17): a streamed answer survives its gateway being killed mid-stream.

``chorus run --role gateway`` and ``--role worker`` as real processes over a real Redis (the
Streams bus), the Anthropic SDK against a loopback model writing slowly, and the platform's
SDK against its loopback stand-in. The gateway is SIGKILLed while the answer's live message
shows a partial text; a new gateway takes the outbound partition over, finds the message in
Redis (``bot/state/draft_messages.py``) and finishes THAT message:

- Slack (``chat.startStream`` streams, and post-then-``chat.update``): the channel ends with
  exactly one bot message, whose text is what an unstreamed reply posts; one stream started,
  nothing posted anew.
- Discord: one message created, edited to the final pieces; the restarted gateway creates none.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from redis.asyncio import Redis

from adapters.slack.convert import reply_to_posts
from bot.events import ConversationKey, Reply
from bot.state import keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    plain_message,
)
from tests.loopback.slack_server import SlackServer
from tests.redis_server import free_port
from tests.slack_rig import BOT_TOKEN, SECRET, mention, post_signed
from tests.test_chat_e2e import base_env, spawn_chorus
from tests.test_stream_discord_e2e import (
    ANSWER,
    discord_env,
    final_contents,
    model_env,
    shown,
    stop,
)
from tests.test_stream_slack_e2e import CHANNEL, USER, within_limits

SLOW = 0.3  # seconds between the model's chunks: the answer takes about 12 s


def unstreamed(thread: str) -> list[str]:
    """What an unstreamed reply to the mention posts (the adapter's own conversion)."""
    reply = Reply(
        conversation=ConversationKey(platform="slack", channel=CHANNEL, thread=thread),
        text=ANSWER,
        reply_to_id=f"{CHANNEL}:{thread}",
        addressed_user_ids=(USER,),
    )
    return [post.text for post in reply_to_posts(reply)]


def bus_env(tmp_path: Path, redis_url: str, tag: str, model: AnthropicServer) -> dict[str, str]:
    return (
        base_env(tmp_path)
        | model_env(model)
        | {"CHORUS_REDIS_URL": redis_url, "CHORUS_BUS": "redis", "CHORUS_BUS_NAMESPACE": tag}
    )


async def until_saved(redis: Redis, key: str) -> dict[str, object]:
    """The live message the gateway saved for the answer (polled)."""
    async with asyncio.timeout(60):
        while True:
            raw = await redis.get(key)
            if raw:
                found: dict[str, object] = json.loads(raw)
                return found
            await asyncio.sleep(0.05)


async def kill(proc: asyncio.subprocess.Process) -> None:
    proc.kill()  # SIGKILL: no shutdown, no drain, nothing finished
    await proc.communicate()


@pytest.mark.parametrize("native", [True, False], ids=["stream-methods", "post-and-update"])
async def test_a_slack_answer_streamed_across_a_gateway_kill_ends_as_one_message(
    tmp_path: Path, real_redis_url: str, real_redis: Redis, key_tag: str, native: bool
) -> None:
    port = free_port()
    async with AnthropicServer() as model, SlackServer(bot_token=BOT_TOKEN) as slack:
        slack.streaming = native
        model.replies.append({"text": ANSWER, "chunk_delay": SLOW})
        common = bus_env(tmp_path, real_redis_url, key_tag, model)
        gateway_env = common | {
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_BASE_URL": slack.api_url,
            "SLACK_HTTP_HOST": "127.0.0.1",
            "SLACK_HTTP_PORT": str(port),
        }
        gateway = await spawn_chorus(["run", "--role", "gateway"], gateway_env, tmp_path)
        worker = await spawn_chorus(["run", "--role", "worker"], common, tmp_path)
        restarted: asyncio.subprocess.Process | None = None
        thread = f"1595926230.{int(key_tag[1:], 16) % 1_000_000:06d}"  # unique per run: the
        conv = ConversationKey(platform="slack", channel=CHANNEL, thread=thread)  # real Redis
        key = keys.live_answer("slack", str(conv), f"{CHANNEL}:{thread}", key_tag)  # remembers
        final = unstreamed(thread)
        try:
            await slack.wait_for(lambda: bool(slack.calls("/api/auth.test")), limit=90)
            event = mention(f"Ev{key_tag}", "tell me slowly")
            event["event"]["ts"] = event["event"]["event_ts"] = thread
            raw = json.dumps(event).encode()
            async with asyncio.timeout(90):
                while True:  # until the events endpoint listens
                    try:
                        status, _ = await post_signed(f"http://127.0.0.1:{port}/slack/events", raw)
                        break
                    except OSError:
                        await asyncio.sleep(0.2)
            assert status == 200
            await slack.wait_for(lambda: any(slack.thread_texts(CHANNEL)), limit=90)
            state = await until_saved(real_redis, key)
            await kill(gateway)
            partial, chunks_then = slack.thread_texts(CHANNEL), len(model.chunk_times)
            restarted = await spawn_chorus(["run", "--role", "gateway"], gateway_env, tmp_path)
            await slack.wait_for(lambda: slack.thread_texts(CHANNEL) == final, limit=120)
        finally:
            errors = [await stop(p) for p in (worker, restarted) if p is not None]
            if gateway.returncode is None:
                await kill(gateway)
        assert all(b"Traceback" not in err for err in errors), errors
    assert chunks_then < 40, "the gateway was killed after the model had finished"
    (text,) = partial
    assert text and text != final[0]
    assert state["ts"] and state["streaming"] is native
    bot_messages = [m for m in slack.messages.values() if m["channel"] == CHANNEL]
    assert len(bot_messages) == 1, bot_messages  # the partial became the answer: one message
    assert slack.thread_texts(CHANNEL) == final
    methods = [m for _, m in slack.method_calls]
    if native:
        assert methods.count("chat.startStream") == 1 and "chat.postMessage" not in methods
        assert methods.count("chat.stopStream") >= 1  # the resumed stream was stopped
    else:
        assert methods.count("chat.postMessage") == 1
    assert within_limits(slack), slack.method_calls  # each method within its tier
    assert await real_redis.get(key) is None  # forgotten once final


async def test_a_discord_answer_streamed_across_a_gateway_kill_is_finished_in_place(
    tmp_path: Path, real_redis_url: str, real_redis: Redis, key_tag: str
) -> None:
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.replies.append({"text": ANSWER, "chunk_delay": SLOW})
        common = bus_env(tmp_path, real_redis_url, key_tag, model)
        gateway = await spawn_chorus(
            ["run", "--role", "gateway"], common | discord_env(discord), tmp_path
        )
        worker = await spawn_chorus(["run", "--role", "worker"], common, tmp_path)
        restarted: asyncio.subprocess.Process | None = None
        message_id = int(key_tag[1:], 16)  # unique per run: the real Redis remembers ids
        conv = ConversationKey(platform="discord", channel=str(CHANNEL_ID))
        key = keys.live_answer("discord", str(conv), str(message_id), key_tag)
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)
            await discord.dispatch(
                "MESSAGE_CREATE",
                plain_message(message_id, f"<@{BOT_ID}> tell me slowly", mentions=[bot_mention()]),
            )
            await discord.wait_for(lambda: any(shown(discord)), limit=90)
            state = await until_saved(real_redis, key)
            await kill(gateway)
            partial, chunks_then = shown(discord), len(model.chunk_times)
            posts_before = len(discord.requests_to("POST", f"/channels/{CHANNEL_ID}/messages"))
            restarted = await spawn_chorus(
                ["run", "--role", "gateway"], common | discord_env(discord), tmp_path
            )
            final = final_contents(ANSWER, message_id)
            await discord.wait_for(lambda: shown(discord) == final, limit=120)
        finally:
            errors = [await stop(p) for p in (worker, restarted) if p is not None]
            if gateway.returncode is None:
                await kill(gateway)
        assert all(b"Traceback" not in err for err in errors), errors
    assert chunks_then < 40, "the gateway was killed after the model had finished"
    (text,) = partial
    assert text != final[0]
    assert state == {"messages": [int(discord.created[0]["id"])]}
    assert len(discord.created) == 1, "one message, finished in place"
    posts = discord.requests_to("POST", f"/channels/{CHANNEL_ID}/messages")
    assert len(posts) == posts_before == 1, "the restarted gateway created nothing"
    assert await real_redis.get(key) is None
