"""Summaries and community notes on the reply path, in the real app against the loopback
Anthropic server: they arrive in the turn's one read (still two Redis round trips per answered
message), sit in the volatile tail after the cache point, as escaped data, only where the scope
keeps them; an answered turn leaves its lines for the summariser in its one write; and
``/forget`` drops what the user's lines fed."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest

from bot.events import ConversationKey, utcnow
from bot.memory import summaries
from bot.state import keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.roundtrips import counting_round_trips
from tests.test_memory_e2e import Console, last_chat_prompt, server, start, stop

__all__ = ["server"]  # the loopback model fixture


def seeded(user: str) -> tuple[summaries.Summary, summaries.Community]:
    at = utcnow() - timedelta(days=2)
    summary = summaries.Summary(
        day=summaries.day_of(at),
        text="Ada said the <b>meetup</b> moved to the Blue Lagoon cafe on Friday.",
        users=(user,),
        first=at,
        last=at,
        lines=4,
    )
    note = summaries.Note(
        kind="norm",
        text="Meetups are announced here",
        user=user,
        message_id="m0",
        at=at,
        confidence=0.9,
    )
    return summary, summaries.Community(notes=(note,), mood="excited", mood_users=(user,))


async def seed(console: Console, conv: ConversationKey, user: str) -> None:
    summary, community = seeded(user)
    redis = console.app.redis
    await redis.set(keys.summary("sum", conv), summaries.dump_summaries([summary]), ex=3600)
    await redis.set(keys.summary("notes", conv), summaries.dump_community(community), ex=3600)


@pytest.mark.redis
async def test_summaries_reach_the_volatile_tail_in_the_one_read(
    redis_url: str, key_tag: str, server: AnthropicServer
) -> None:
    console, listener = await start(redis_url, server, key_tag)
    ada = f"ada-{key_tag}"
    conv = ConversationKey(platform="console", channel=ada)
    try:
        await console.say("ada", "warm-up")
        await seed(console, conv, ada)
        with counting_round_trips() as trips:
            await console.say("ada", "Where is the meetup on Friday?")
        assert len(trips.turn) == 2, [w[:80] for w in trips.turn]  # no extra round trip
        prompt = last_chat_prompt(server)
        assert "Blue Lagoon cafe on Friday" in prompt
        assert "&lt;b&gt;meetup&lt;/b&gt;" in prompt and "<b>" not in prompt
        assert "Meetups are announced" not in prompt  # community memory is off by default
        chats = [b for b in server.bodies if "output_config" not in b]
        last = chats[-1]["messages"][-1]["content"][-1]
        assert "cache_control" not in last and "<summaries" in last["text"]
        # The answered turn scheduled the conversation's summary, in that same write.
        due = await console.app.redis.zscore(keys.summary_queue(), str(conv))
        assert due == int(summaries.next_day_due(utcnow()).timestamp() * 1000)  # after its day
    finally:
        await stop(console, listener)
        await console.app.redis.zrem(keys.summary_queue(), str(conv))


@pytest.mark.redis
async def test_forget_drops_the_summaries_and_notes_the_users_lines_fed(
    redis_url: str, key_tag: str, server: AnthropicServer
) -> None:
    console, listener = await start(redis_url, server, key_tag)
    ada = f"ada-{key_tag}"
    conv = ConversationKey(platform="console", channel=ada)
    try:
        await seed(console, conv, ada)
        await console.say("ada", "/forget")
        redis = console.app.redis
        assert not await redis.exists(keys.summary("sum", conv), keys.summary("notes", conv))
        await console.say("ada", "Where is the meetup on Friday?")
        assert "Blue Lagoon" not in last_chat_prompt(server)
    finally:
        await stop(console, listener)
        await console.app.redis.zrem(keys.summary_queue(), str(conv))


async def test_a_scope_turns_community_memory_on_for_its_channel(
    tmp_path: Path, server: AnthropicServer, key_tag: str
) -> None:
    from bot.app import Chorus
    from bot.settings import load_settings

    config = tmp_path / "chorus.toml"
    config.write_text(
        '[[scope]]\nmatch = "console"\ncommunity_memory = true\nsummary_ttl_days = 3\n',
        encoding="utf-8",
    )
    env = {
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": server.base_url,
        "CHORUS_REDIS_URL": f"memory://scope-{key_tag}",
    }
    settings = load_settings(environ=env, env_file=None, config=config, warn=False)
    app = await Chorus.from_settings(settings)
    await app.start()
    console = Console(app, key_tag)
    listener = asyncio.create_task(console.listen())
    ada = f"ada-{key_tag}"
    conv = ConversationKey(platform="console", channel=ada)
    try:
        await seed(console, conv, ada)
        await console.say("ada", "Where is the meetup on Friday?")
        prompt = last_chat_prompt(server)
        assert "mood: excited" in prompt and "Meetups are announced here" in prompt
        job = await app.redis.hgetall(keys.summary("job", conv))
        assert job == {"ttl": "3", "community": "1"}  # the scope's settings, for the worker
    finally:
        await stop(console, listener)


def test_community_memory_where_no_summaries_run_is_a_configuration_error(tmp_path: Path) -> None:
    from bot.settings import ConfigError, load_settings

    config = tmp_path / "chorus.toml"
    config.write_text('[[scope]]\nmatch = "console"\ncommunity_memory = true\n', encoding="utf-8")
    env = {"CHORUS_MODEL": "anthropic:claude-test", "ANTHROPIC_API_KEY": "k"}
    for off in ({"CHORUS_INSIGHTS_ENABLED": "false"}, {"CHORUS_SUMMARIES": "false"}):
        with pytest.raises(ConfigError, match="community_memory"):
            load_settings(environ=env | off, env_file=None, config=config, warn=False)
    assert load_settings(environ=env, env_file=None, config=config, warn=False).file.scopes
