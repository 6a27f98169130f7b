"""Lossless EventSub reconnects (``adapters/twitch/eventsub.py``) with real twitchio 3 against
the loopback Twitch: events Twitch sends on the old socket while the new one waits for its
welcome are answered, and a notification delivered twice (same ``message_id``, on either
socket) is published once. The rig (stand-in router, loopback server) is test_twitch_e2e's.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
import twitchio.eventsub.websockets as twitch_ws

from adapters.twitch.eventsub import OVERRIDDEN, HandoverWebsocket, RecentIds, check_twitchio
from tests.test_twitch_e2e import CHAT, WAIT, Rig, chat_event, rig, server, twitch_env

__all__ = ["rig", "server", "twitch_env"]  # fixtures, re-used


def chat(message_id: str, n: int) -> tuple[str, dict[str, Any]]:
    user = str(5_000_000 + n)
    return CHAT, chat_event(message_id, chatter_user_id=user, chatter_user_login=f"viewer{n}")


async def seen(rig: Rig, count: int) -> list[str]:
    """Wait until the stand-in router has seen ``count`` messages; their ids."""
    async with asyncio.timeout(WAIT * 3):
        while len(rig.seen) < count:
            await rig.inbound.get()
    return [m.id for m in rig.seen]


@pytest.mark.parametrize("same_session", [False, True], ids=["new-session", "same-session"])
async def test_three_handovers_with_events_in_flight_answer_each_exactly_once(
    rig: Rig, same_session: bool
) -> None:
    server = rig.server
    server.same_session_on_reconnect = same_session
    expected: list[str] = []
    for round_ in range(3):
        before = f"r{round_}-before"
        await server.notify(*chat(before, 0))
        during = [chat(f"r{round_}-during-{i}", i + 1) for i in range(4)]
        (session,) = server.live_sessions()
        on_old = await server.reconnect_with_traffic(session, during)
        assert len(on_old) == 4  # all four were sent on the old socket, before the welcome
        await server.redeliver(on_old[0])  # at least once: again, now on the new socket
        after = f"r{round_}-after"
        await server.notify(*chat(after, 9))
        expected += [before, *(e["message_id"] for _, e in during), after]
        assert set(await seen(rig, len(expected))) == set(expected)  # this round's, all read
    await rig.bus.drain(WAIT)
    assert Counter(m.id for m in rig.seen) == Counter(expected)  # each once, none lost
    replies = Counter(s["reply_parent_message_id"] for s in server.sent)
    assert replies == Counter(expected)  # each answered exactly once
    assert rig.adapter.client.recent_events.duplicates == 3
    assert len([c for c in server.connections if not c.closed]) == 1
    posts = [r for r in server.requests if r.path == "/helix/eventsub/subscriptions"]
    assert len(posts) == 4  # nothing re-subscribed: Twitch moved the subscriptions each time
    sockets = [s for p in rig.adapter.client._websockets.values() for s in p.values()]
    assert len(sockets) == 1 and isinstance(sockets[0], HandoverWebsocket)
    assert sockets[0].session_id == server.live_sessions()[0]


async def test_a_duplicate_on_the_same_socket_is_published_once(rig: Rig) -> None:
    server = rig.server
    (first,) = await server.notify_ids(*chat("dup-1", 1))
    await server.redeliver(first)
    await server.notify(*chat("dup-2", 2))
    assert await seen(rig, 2) == ["dup-1", "dup-2"]
    await rig.bus.drain(WAIT)
    assert [s["reply_parent_message_id"] for s in server.sent] == ["dup-1", "dup-2"]


async def test_a_failed_reconnect_url_falls_back_to_a_fresh_session(rig: Rig) -> None:
    """Twitch's advice when ``reconnect_url`` fails: connect afresh and subscribe again."""
    server = rig.server
    (session,) = server.live_sessions()
    connections = len(server.connections)
    old = server.connections[-1]
    url = f"{server.ws_url.replace('/ws', '/gone')}"
    message = {
        "metadata": {"message_id": "r-1", "message_type": "session_reconnect"},
        "payload": {"session": {"id": session, "reconnect_url": url}},
    }
    await old.ws.send_json(message)
    await server.wait_until(lambda: len(server.live_sessions()) == 1 and old.closed, WAIT * 2)
    await server.wait_until(lambda: len(server.connections) > connections, WAIT)
    (fresh,) = server.live_sessions()
    assert fresh != session
    await server.wait_until(  # twitchio subscribed again on the fresh session
        lambda: sum(s.session_id == fresh for s in server.subscriptions.values()) == 4, WAIT
    )
    await server.notify(*chat("after-fallback", 1))
    assert await seen(rig, 1) == ["after-fallback"]
    await rig.bus.drain(WAIT)
    assert [s["reply_parent_message_id"] for s in server.sent] == ["after-fallback"]


def test_recent_ids_are_bounded_and_catch_repeats() -> None:
    recent = RecentIds(capacity=3)
    assert [recent.first_time(i) for i in ("a", "b", "a", "c", "d")] == [
        True,
        True,
        False,
        True,
        True,
    ]
    assert len(recent) == 3 and recent.duplicates == 1
    assert not recent.first_time("a")  # kept: seen again after "b", so "b" went first
    assert recent.first_time("b")  # forgotten: it was the least recently seen


def test_the_twitchio_internals_the_handover_overrides_exist(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_twitchio()
    for name in OVERRIDDEN:
        assert hasattr(twitch_ws.Websocket, name), name
    monkeypatch.delattr(twitch_ws.Websocket, "_process_reconnect")
    with pytest.raises(RuntimeError, match="_process_reconnect"):
        check_twitchio()
