"""Streamed answers on Slack, as users meet them: ``chorus run`` as a real process (the Events
API over HTTP, signed like Slack signs), slack-sdk against the loopback Web API stand-in, the
Anthropic SDK against a loopback model writing 40 chunks 100 ms apart.

- With Slack's streaming methods: ``chat.startStream`` shows the first words long before the
  model ends, ``chat.appendStream`` adds the rest, ``chat.stopStream`` ends the stream and the
  message is updated to exactly what an unstreamed reply posts.
- Without them (the app lacks the feature: ``unknown_method``): the first draft is posted, then
  ``chat.update``d, and ends the same.
Both stay within Slack's limits: each method's calls per minute, one post a second per channel.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import pytest

from adapters.slack.convert import reply_to_posts
from bot.events import ConversationKey, Reply
from bot.platform.streaming import answer_key
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.slack_server import SlackServer
from tests.redis_server import free_port
from tests.slack_rig import BOT_TOKEN, SECRET, mention, post_signed
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_stream_discord_e2e import ANSWER, WORDS

CHANNEL, THREAD, USER = "C111", "1595926230.009600", "W222"  # the mention fixture's
TIERS = {"chat.startStream": 20, "chat.appendStream": 100, "chat.update": 50, "chat.stopStream": 20}


def expected() -> list[str]:
    reply = Reply(
        conversation=ConversationKey(platform="slack", channel=CHANNEL, thread=THREAD),
        text=ANSWER,
        reply_to_id=f"{CHANNEL}:{THREAD}",
        addressed_user_ids=(USER,),
    )
    assert answer_key(reply.conversation, reply.reply_to_id)  # (the key drafts use too)
    return [post.text for post in reply_to_posts(reply)]


def within_limits(slack: SlackServer) -> bool:
    calls = slack.method_calls
    for method, per_minute in TIERS.items():
        times = [t for t, m in calls if m == method]
        if any(sum(1 for u in times if t <= u < t + 60) > per_minute for t in times):
            return False
    posting = ("chat.postMessage", "chat.startStream") if slack.streaming else ("chat.postMessage",)
    posts = sorted(t for t, m in calls if m in posting)  # (a refused start posted nothing)
    return all(b - a >= 0.9 for a, b in zip(posts, posts[1:], strict=False))


@pytest.mark.parametrize("native", [True, False], ids=["stream-methods", "post-and-update"])
async def test_a_streamed_slack_answer_shows_early_and_ends_as_unstreamed(
    tmp_path: Path, native: bool
) -> None:
    port = free_port()
    async with AnthropicServer() as model, SlackServer(bot_token=BOT_TOKEN) as slack:
        slack.streaming = native
        model.replies.append({"text": ANSWER, "chunk_delay": 0.1})
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "SLACK_BOT_TOKEN": BOT_TOKEN,
            "SLACK_SIGNING_SECRET": SECRET,
            "SLACK_API_BASE_URL": slack.api_url,
            "SLACK_HTTP_HOST": "127.0.0.1",
            "SLACK_HTTP_PORT": str(port),
            "PYTHONPATH": str(ROOT),
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await slack.wait_for(lambda: bool(slack.calls("/api/auth.test")), limit=90)
            raw = json.dumps(mention("EvStream1", "tell me slowly")).encode()
            async with asyncio.timeout(90):
                while True:  # until the events endpoint listens
                    try:
                        status, _ = await post_signed(f"http://127.0.0.1:{port}/slack/events", raw)
                        break
                    except OSError:
                        await asyncio.sleep(0.2)
            assert status == 200
            await slack.wait_for(lambda: any(slack.thread_texts(CHANNEL)), limit=90)
            early, chunks_then = slack.thread_texts(CHANNEL), len(model.chunk_times)
            await slack.wait_for(lambda: slack.thread_texts(CHANNEL) == expected(), limit=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]
    assert chunks_then < WORDS, "the text was visible only once the model had finished"
    (first,) = early
    assert first and first != expected()[0]
    assert "@everyone" not in first  # neutralised in drafts too
    methods = [m for _, m in slack.method_calls]
    if native:
        assert methods.count("chat.startStream") == 1 and methods.count("chat.stopStream") == 1
        assert methods.count("chat.appendStream") >= 1
        started = slack.calls("/api/chat.startStream")[0].body
        assert started["thread_ts"] == THREAD and started["recipient_user_id"] == USER
        assert "chat.postMessage" not in methods
    else:
        assert methods.count("chat.postMessage") == 1 and methods.count("chat.update") >= 2
    assert within_limits(slack), slack.method_calls
