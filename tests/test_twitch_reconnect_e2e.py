"""``chorus run`` as a real process through three Twitch ``session_reconnect`` handovers with
chat in flight: every message answered exactly once.

Real twitchio 3 in the child process talks to the loopback Twitch (EventSub websocket, Helix,
OAuth) run by this test; the router, the engagement policy and the Anthropic SDK (against its
loopback server) are wired by the composition root. Each handover is Twitch's: while the new
connection waits for its welcome, four mentions go out on the old connection; then the new one
is welcomed and the old closed; one of the four is delivered again (same EventSub
``message_id``) on the new connection. Replies are counted per message from the loopback's
recorded Send Chat Message calls; ``/metrics`` shows each message was published once.
"""

from __future__ import annotations

import asyncio
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import CLIENT_ID, CLIENT_SECRET, TwitchServer
from tests.redis_server import free_port
from tests.test_chat_e2e import base_env, spawn_chorus
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHANNEL, CHANNEL_LOGIN, CHAT, chat_event

LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens


def mention(message_id: str, n: int) -> tuple[str, dict[str, Any]]:
    """A mention from viewer ``n`` (one viewer per message: no per-user cooldown applies)."""
    user = str(6_000_000 + n)
    event = chat_event(message_id, chatter_user_id=user, chatter_user_login=f"fan{n}")
    return CHAT, event


def twitch_env(twitch: TwitchServer) -> dict[str, str]:
    return {
        "TWITCH_CLIENT_ID": CLIENT_ID,
        "TWITCH_CLIENT_SECRET": CLIENT_SECRET,
        "TWITCH_ACCESS_TOKEN": "access-0",
        "TWITCH_REFRESH_TOKEN": "refresh-0",
        "TWITCH_CHANNELS": CHANNEL_LOGIN,
        "TWITCH_BOT_IS_MOD": "true",
        "TWITCH_API_BASE_URL": twitch.helix_url,
        "TWITCH_AUTH_BASE_URL": twitch.auth_url,
        "TWITCH_EVENTSUB_WS_URL": twitch.ws_url,
    }


def answered(twitch: TwitchServer) -> Counter[str]:
    return Counter(str(s.get("reply_parent_message_id")) for s in twitch.sent)


async def test_three_reconnects_with_messages_in_flight_answer_each_exactly_once(
    tmp_path: Path,
) -> None:
    port = free_port()
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(CHANNEL, CHANNEL_LOGIN)
        twitch.grant(BOT_ID, "access-0", "refresh-0")
        env = base_env(tmp_path) | twitch_env(twitch)
        env |= {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_HEALTH_PORT": str(port),
            "CHORUS_HEALTH_HOST": "127.0.0.1",
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        expected: list[str] = []
        in_flight: list[str] = []
        try:
            await twitch.wait_until(lambda: len(twitch.subscriptions) == 4, LIMIT)
            viewer = 0
            for round_ in range(3):
                for k in range(2):
                    viewer += 1
                    expected.append(f"r{round_}-before-{k}")
                    await twitch.notify(*mention(expected[-1], viewer))
                during = []
                for k in range(4):
                    viewer += 1
                    during.append(mention(f"r{round_}-during-{k}", viewer))
                (session,) = twitch.live_sessions()
                on_old = await twitch.reconnect_with_traffic(session, during, LIMIT)
                assert len(on_old) == 4  # sent on the old socket while the new one waited
                expected += [event["message_id"] for _, event in during]
                in_flight += [event["message_id"] for _, event in during]
                await twitch.redeliver(on_old[0])  # at least once: again, on the new socket
                for k in range(2):
                    viewer += 1
                    expected.append(f"r{round_}-after-{k}")
                    await twitch.notify(*mention(expected[-1], viewer))
            await twitch.wait_until(lambda: set(answered(twitch)) >= set(expected), LIMIT)
            # The duplicates went out before later messages on the same socket, so once the
            # last message is answered they have been read: a double answer would show now.
            await twitch.notify(*mention("last", viewer + 1))
            await twitch.wait_until(lambda: "last" in answered(twitch), LIMIT)
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"http://127.0.0.1:{port}/metrics") as response,
            ):
                metrics = await response.text()
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]
        replies = answered(twitch)
        assert replies == Counter([*expected, "last"])  # every message, each exactly once
        assert len(in_flight) == 12 and all(replies[i] == 1 for i in in_flight)
        assert len([c for c in twitch.connections if c.welcomed]) == 4  # three handovers
        posts = [r for r in twitch.requests if r.path == "/helix/eventsub/subscriptions"]
        assert len(posts) == 4  # Twitch moved the subscriptions; nothing was re-subscribed
        # each message published once (duplicates dropped in the adapter, not later)
        assert f'chorus_messages_in_total{{platform="twitch"}} {len(expected) + 1}.0' in metrics
        assert "chorus_twitch_eventsub_duplicates_total 3.0" in metrics
        assert b"twitch eventsub handed over" in err
