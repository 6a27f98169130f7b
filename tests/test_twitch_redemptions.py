"""Channel-point redemptions on Twitch: the conversion of the recorded payload, and the adapter
(real twitchio 3) against the loopback Twitch, which refuses the subscription unless it is made
with the broadcaster's own token carrying ``channel:read:redemptions`` on a session of that user.

Without a stored broadcaster token the adapter says once which channels lack it and which
command to run, and chat goes on; with one it subscribes on the broadcaster's own EventSub socket
(the token refreshed on the way and written back to the store), and a redemption arrives on the
inbound topic as a line carrying a ``REDEMPTION`` stream event. A broadcaster token that expires
while the adapter runs is refreshed by twitchio and the new pair written back, the bot's own pair
untouched."""

from __future__ import annotations

import asyncio
import copy
import logging
import stat
from pathlib import Path
from typing import Any

import pytest
from twitchio.models.eventsub_ import create_event_instance

from adapters.twitch import convert
from adapters.twitch.convert import BotIdentity
from adapters.twitch.tokens import StateBroadcasterStore, StoredTokens, broadcaster_store
from bot.events import Role, StreamEventKind
from bot.state.platforms import PlatformTokens
from tests.loopback.twitch_server import CLIENT_ID, REDEMPTION, TwitchServer, fixture
from tests.test_twitch_e2e import (  # noqa: F401  (fixtures)
    BOT_ID,
    CHANNEL,
    CHANNEL_LOGIN,
    CHAT,
    WAIT,
    Rig,
    _rig,
    server,
    twitch_env,
)

BOT = BotIdentity(id=BOT_ID, login="mybot")
NAME = "twitch_channel_points_custom_reward_redemption_add"
SCOPE = ("channel:read:redemptions",)


def redemption_event(**changes: Any) -> dict[str, Any]:
    event: dict[str, Any] = copy.deepcopy(fixture(NAME)["payload"]["event"])
    reward = changes.pop("reward", None)
    event.update(changes)
    if reward:
        event["reward"] = {**event["reward"], **reward}
    return event


def _model(**changes: Any) -> Any:
    data = copy.deepcopy(fixture(NAME))
    data["payload"]["event"] = redemption_event(**changes)
    return create_event_instance(REDEMPTION, data, http=None)


def test_a_redemption_is_a_line_of_the_viewer_carrying_the_reward() -> None:
    message = convert.redemption(_model(), bot=BOT, ambient=True)
    assert message.id == "redemption-17fa2df1-ad76-4804-bfa5-a40ef63efe63"
    assert message.conversation.channel == CHANNEL and message.server == "streamer"
    assert message.author.id == "4145994" and message.author.display_name == "viewer32"
    assert message.author.roles == frozenset()
    assert message.text == "test user input" and message.ambient and not message.addressed
    assert message.sent_at.isoformat().startswith("2020-07-15T17:16:03")
    event = message.stream_event
    assert event is not None and event.kind is StreamEventKind.REDEMPTION
    assert (event.reward, event.reward_id, event.cost) == (
        "title",
        "92af127c-7326-4483-a52b-b0da0be61c01",
        100,
    )
    assert (event.user_id, event.user_name) == ("4145994", "viewer32")
    # Through the bus and back, unchanged; another kind of event carries no reward keys.
    assert type(message).model_validate_json(message.model_dump_json()) == message


def test_a_redemption_that_mentions_the_bot_is_addressed_and_the_broadcasters_is_the_owners() -> (
    None
):
    mention = convert.redemption(_model(user_input="hey @MyBot read this"), bot=BOT, ambient=True)
    assert mention.mentions_bot and not mention.ambient
    own = convert.redemption(
        _model(user_id=CHANNEL, user_login="streamer", user_name="Streamer", user_input=""),
        bot=BOT,
        ambient=True,
    )
    assert own.author.roles == frozenset({Role.OWNER}) and own.text == ""


async def test_beside_a_token_file_each_broadcaster_has_a_file_of_its_own(tmp_path: Path) -> None:
    spec = f"file:{tmp_path}/tokens.json"
    store = broadcaster_store(spec, tokens=None, client_id=CLIENT_ID, broadcaster_id=CHANNEL)
    pair = StoredTokens(access_token="a", refresh_token="r", user_id=CHANNEL)
    await store.save(pair)
    path = tmp_path / f"tokens.broadcaster-{CHANNEL}.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert await store.load() == pair
    with pytest.raises(ValueError, match="not a Twitch user id"):  # never a path of its own
        broadcaster_store(spec, tokens=None, client_id=CLIENT_ID, broadcaster_id="../x")


async def _start(rig: Rig) -> asyncio.Task[None]:
    return asyncio.create_task(rig.adapter.run())


async def _stop(rig: Rig, runner: asyncio.Task[None]) -> None:
    await rig.adapter.aclose()
    await asyncio.wait_for(runner, WAIT)
    for task in rig.tasks:
        task.cancel()
    await asyncio.gather(*rig.tasks, return_exceptions=True)
    await rig.bus.close()
    await rig.redis.aclose()


async def test_without_a_broadcaster_token_chat_goes_on_and_the_command_is_named(
    server: TwitchServer,  # noqa: F811 (the fixture imported above)
    twitch_env: Any,  # noqa: F811
    key_tag: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    twitch_env(server)
    rig = await _rig(server, key_tag)
    caplog.set_level(logging.INFO, logger="chorus.twitch")
    runner = await _start(rig)
    try:
        await server.wait_until(lambda: len(server.subscriptions) == 4, WAIT)
        await _started(rig)
        said = [r.getMessage() for r in caplog.records if "redemptions are off" in r.getMessage()]
        assert len(said) == 1, said
        assert "chorus auth twitch --broadcaster" in said[0] and CHANNEL_LOGIN in said[0]
        assert all(s.type != REDEMPTION for s in server.subscriptions.values())
        assert await server.notify(REDEMPTION, redemption_event()) == 0
        assert (await rig.say("chat-1")).text  # chat goes on
    finally:
        await _stop(rig, runner)


async def test_a_token_short_of_the_scope_is_named_too(
    server: TwitchServer,  # noqa: F811 (the fixture imported above)
    twitch_env: Any,  # noqa: F811
    key_tag: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server.grant(CHANNEL, "bc-access-1", "bc-refresh-1", scopes=("user:read:chat",))
    twitch_env(server)
    rig = await _rig(server, key_tag)
    pair = StoredTokens(access_token="bc-access-1", refresh_token="bc-refresh-1")
    await StateBroadcasterStore(PlatformTokens(rig.redis), CLIENT_ID, CHANNEL).save(pair)
    caplog.set_level(logging.INFO, logger="chorus.twitch")
    runner = await _start(rig)
    try:
        await server.wait_until(lambda: len(server.subscriptions) == 4, WAIT)
        await _started(rig)
        (record,) = [r for r in caplog.records if "redemptions are off" in r.getMessage()]
        assert "chorus auth twitch --broadcaster" in record.getMessage()
        assert getattr(record, "channels", None) == {
            CHANNEL_LOGIN: "the broadcaster's token lacks channel:read:redemptions"
        }
        assert "bc-access-1" not in caplog.text
    finally:
        await _stop(rig, runner)


async def test_a_stored_broadcaster_token_reads_redemptions_on_its_own_socket(
    server: TwitchServer,  # noqa: F811 (the fixture imported above)
    twitch_env: Any,  # noqa: F811
    key_tag: str,
) -> None:
    # About to expire: twitchio refreshes it when it is added, and the new pair is stored.
    server.grant(CHANNEL, "bc-access-0", "bc-refresh-0", scopes=SCOPE, expires_in=600)
    twitch_env(server)
    rig = await _rig(server, key_tag)
    store = StateBroadcasterStore(PlatformTokens(rig.redis), CLIENT_ID, CHANNEL)
    await store.save(StoredTokens(access_token="bc-access-0", refresh_token="bc-refresh-0"))
    runner = await _start(rig)
    try:
        await server.wait_until(lambda: len(server.subscriptions) == 5, WAIT)
        (sub,) = [s for s in server.subscriptions.values() if s.type == REDEMPTION]
        assert sub.user_id == CHANNEL and sub.condition["broadcaster_user_id"] == CHANNEL
        chat_sessions = {s.session_id for s in server.subscriptions.values() if s.type == CHAT}
        assert sub.session_id not in chat_sessions  # the broadcaster's own socket
        ((old, refreshed),) = [r for r in server.refreshed if r[0] == "bc-refresh-0"]
        assert sub.token == refreshed
        stored = await store.load()
        assert stored is not None and stored.access_token == refreshed
        assert stored.user_id == CHANNEL

        event = redemption_event(
            id="r-1", user_input="drink some water", reward={"title": "Hydrate", "cost": 250}
        )
        assert await server.notify(REDEMPTION, event) == 1
        message = await rig.next_message()
        assert message.id == "redemption-r-1" and message.text == "drink some water"
        found = message.stream_event
        assert found is not None and found.kind is StreamEventKind.REDEMPTION
        assert (found.reward, found.cost, found.user_name) == ("Hydrate", 250, "viewer32")
        # A reply to it cannot be threaded to a redemption: it goes out as a mention.
        await server.wait_until(lambda: len(server.sent) >= 1, WAIT)
        assert server.sent[-1].get("reply_parent_message_id") is None
        assert await rig.adapter.ready()
    finally:
        await _stop(rig, runner)


async def test_a_broadcaster_token_refreshed_while_running_is_written_back(
    server: TwitchServer,  # noqa: F811 (the fixture imported above)
    twitch_env: Any,  # noqa: F811
    key_tag: str,
) -> None:
    server.grant(CHANNEL, "bc-access-2", "bc-refresh-2", scopes=SCOPE)
    twitch_env(server)
    rig = await _rig(server, key_tag)
    store = StateBroadcasterStore(PlatformTokens(rig.redis), CLIENT_ID, CHANNEL)
    await store.save(StoredTokens(access_token="bc-access-2", refresh_token="bc-refresh-2"))
    runner = await _start(rig)
    try:
        await server.wait_until(lambda: len(server.subscriptions) == 5, WAIT)
        server.revoke("bc-access-2")  # it expired: Helix answers 401 "Invalid OAuth token"
        users = await rig.adapter.client.fetch_users(ids=[CHANNEL], token_for=CHANNEL)
        assert [u.id for u in users] == [CHANNEL]  # twitchio refreshed the pair and retried
        ((old, new_access),) = server.refreshed
        assert old == "bc-refresh-2"

        async def written_back() -> StoredTokens:
            while True:
                stored = await store.load()
                if stored is not None and stored.access_token == new_access:
                    return stored
                await asyncio.sleep(0.02)

        stored = await asyncio.wait_for(written_back(), WAIT)
        assert stored.refresh_token != "bc-refresh-2" and stored.user_id == CHANNEL
        bot_pair = rig.adapter.client.tokens.get(BOT_ID)
        assert bot_pair is not None and bot_pair["token"] == "access-0"  # the bot's untouched
    finally:
        await _stop(rig, runner)


async def _started(rig: Rig) -> None:
    """Until ``start`` finished (the redemptions are decided before sending starts)."""
    async with asyncio.timeout(WAIT):
        while True:
            if await rig.adapter.ready():
                return
            await asyncio.sleep(0.02)
