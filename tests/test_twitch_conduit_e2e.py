"""Twitch over an EventSub conduit, end to end: two real ``chorus run --role gateway`` processes
and a worker on a real Redis, the loopback Twitch speaking the conduit API.

- The first gateway creates the conduit (4 shards) and takes them all; the second arrives and
  the shards split two and two (leases in Redis), each shard PATCHed to its process's socket.
- Mentions in the configured channel are answered once each, and reach both processes (Twitch
  hands each notification to any enabled shard).
- A channel joined from the dashboard (the worker serves it) while everything runs: the gateway
  holding shard 0 subscribes it with the app token and its mentions are answered; a channel
  joined with ``chorus twitch join`` whose broadcaster granted nothing is refused, and the log
  names what the broadcaster must do.
- SIGKILL of one gateway: its sockets close, Twitch disables its shards and hands the chat to
  the other's; its leases lapse and the survivor takes its shards over (PATCHes them to its own
  sessions). Every line sent before, during and after the failover is answered exactly once.
- Resizing (its own application, so its conduit record is its own): a gateway restarted with
  more shards grows the conduit and every shard gets a transport across both gateways; restarted
  with fewer it shrinks it; chat sent throughout is answered exactly once.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from collections import Counter
from pathlib import Path

import aiohttp
import pytest
from redis.asyncio import Redis

from bot.state.conduits import RedisConduitStore
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.twitch_server import TwitchServer
from tests.outage_rig import until_drained
from tests.redis_server import free_port
from tests.test_chat_e2e import base_env, run_chorus, spawn_chorus, stopped
from tests.test_live_pause_e2e import line
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHAT
from tests.test_twitch_reconnect_e2e import answered, twitch_env

pytestmark = pytest.mark.e2e

LIMIT = 120.0  # generous: a loaded 2-core machine; every wait ends as soon as its event happens
SHARDS = 4
SCOPES = ("user:read:chat", "user:write:chat", "user:bot")
ADMIN_TOKEN = "conduit-admin-token-0123456789"
bearer = {"Authorization": f"Bearer {ADMIN_TOKEN}"}


async def _up(http: aiohttp.ClientSession, url: str) -> bool:
    try:
        async with http.get(f"{url}/live", headers=bearer) as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False


def _tried(twitch: TwitchServer, broadcaster: str) -> bool:
    """Whether a conduit subscription for ``broadcaster``'s chat was asked for and refused."""
    return any(
        (body.get("condition") or {}).get("broadcaster_user_id") == broadcaster
        for body in twitch.conduit_refused
    )


async def _poll(check: object, what: str, limit: float = LIMIT) -> None:
    assert callable(check)
    try:
        async with asyncio.timeout(limit):
            while not await check():  # noqa: ASYNC110 (other processes' state: no event here)
                await asyncio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"timed out waiting for {what}") from None


async def test_two_gateways_share_a_conduit_join_a_channel_and_survive_a_kill(
    tmp_path: Path, real_redis_url: str, real_redis: Redis, key_tag: str
) -> None:
    base = 8_000_000_000 + int(key_tag[1:], 16) % 10**8 * 10
    first, joined, refused = (
        (str(base + 1), "first"),
        (str(base + 2), "later"),
        (str(base + 3), "nogrant"),
    )
    tag = uuid.uuid4().hex[:6]
    async with AnthropicServer() as model, TwitchServer() as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        for channel_id, login in (first, joined, refused):
            twitch.add_user(channel_id, login)
        twitch.grant(BOT_ID, "access-0", "refresh-0", scopes=SCOPES)
        twitch.channel_bot |= {first[0], joined[0]}  # the third broadcaster granted nothing
        twitch.keepalive_every = 5.0  # Twitch sends session_keepalive while a socket is quiet
        env = base_env(tmp_path) | twitch_env(twitch)
        env |= {
            "TWITCH_CHANNELS": first[1],
            "TWITCH_TRANSPORT": "conduit",
            "TWITCH_CONDUIT_SHARDS": str(SHARDS),
            "TWITCH_SHARD_LEASE_SECONDS": "3",
            "TWITCH_TOKEN_STORE": f"file:{tmp_path / 'tokens.json'}",
            "CHORUS_BUS": "redis",
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS_NAMESPACE": key_tag,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
        }
        store = RedisConduitStore(real_redis)
        app = env["TWITCH_CLIENT_ID"]
        sent: list[str] = []
        viewer = [0]

        async def say(channel: tuple[str, str], name: str) -> str:
            viewer[0] += 1
            msg_id = f"{tag}-{name}"
            event = line(
                channel, msg_id, f"question {name}?", str(7_000_000 + viewer[0]), mention=True
            )
            assert await twitch.notify(CHAT, event) == 1, f"no enabled shard took {msg_id}"
            sent.append(msg_id)
            return msg_id

        async def owners() -> dict[int, str]:
            conduit = await store.conduit(app)
            return {} if conduit is None else await store.owners(conduit, SHARDS)

        def pid_of(owner: str) -> int:
            return int(owner.split(":")[1])

        procs: list[asyncio.subprocess.Process] = []
        try:
            gw1 = await spawn_chorus(["run", "--role", "gateway"], env, tmp_path)
            procs.append(gw1)

            async def all_on(pids: set[int]) -> bool:
                held = await owners()
                enabled = twitch.shard_sessions()
                return (
                    len(held) == SHARDS
                    and {pid_of(o) for o in held.values()} == pids
                    and len(enabled) == SHARDS
                    and len(set(enabled.values())) == SHARDS
                )

            await _poll(lambda: all_on({gw1.pid}), "the first gateway to hold every shard")
            assert len(twitch.conduits) == 1  # created once
            gw2 = await spawn_chorus(["run", "--role", "gateway"], env, tmp_path)
            admin_port = free_port()  # the worker serves the dashboard
            dashboard = {"CHORUS_ADMIN_PORT": str(admin_port), "CHORUS_ADMIN_TOKEN": ADMIN_TOKEN}
            worker = await spawn_chorus(["run", "--role", "worker"], env | dashboard, tmp_path)
            procs += [gw2, worker]
            await _poll(lambda: all_on({gw1.pid, gw2.pid}), "the shards to split over two gateways")
            split = Counter(pid_of(o) for o in (await owners()).values())
            assert split == Counter({gw1.pid: 2, gw2.pid: 2})
            assert len(twitch.conduits) == 1  # the second gateway adopted the conduit

            # chat in the configured channel: answered once each, delivered to both processes
            for n in range(8):
                await say(first, f"split-{n}")
            await twitch.wait_until(lambda: set(answered(twitch)) >= set(sent), LIMIT)
            held = await owners()
            takers = {pid_of(held[int(shard)]) for _, shard in twitch.deliveries}
            assert takers == {gw1.pid, gw2.pid}

            # join two channels at run time: one from the dashboard (its broadcaster granted
            # channel:bot), one with `chorus twitch join` (its broadcaster granted nothing)
            async with aiohttp.ClientSession() as http:
                url = f"http://127.0.0.1:{admin_port}"
                await _poll(lambda: _up(http, url), "the dashboard")
                form = {"channel": joined[1], "action": "join"}
                async with http.post(f"{url}/live/twitch/channels", data=form, headers=bearer) as r:
                    assert f"Joined #{joined[1]}" in await r.text()
            code, out, err = await run_chorus(["twitch", "join", refused[1]], env, tmp_path)
            assert code == 0, err
            assert f"#{refused[1]} joined" in out
            await twitch.wait_until(
                lambda: "channel.chat.message" in twitch.conduit_subscribed(joined[0]), LIMIT
            )
            late = await say(joined, "joined-0")
            await twitch.wait_until(lambda: late in answered(twitch), LIMIT)
            # the refused channel's subscription was tried and refused before the kill below
            # (else the gateway that would log why might be the one killed before it tried)
            await twitch.wait_until(lambda: _tried(twitch, refused[0]), LIMIT)
            assert twitch.conduit_subscribed(refused[0]) == set()

            # Every reply posted is acked first, as the outbox test does: a reply the killed
            # gateway posted but had not acked yet would be posted again by the survivor
            # (at-least-once to Twitch; not what this tests).
            await asyncio.wait_for(until_drained(real_redis, key_tag, "twitch"), LIMIT)

            # SIGKILL the gateway holding shard 0; chat goes on during the failover
            victim = gw1 if pid_of((await owners())[0]) == gw1.pid else gw2
            survivor = gw2 if victim is gw1 else gw1
            victim.send_signal(signal.SIGKILL)
            await victim.wait()
            await twitch.wait_until(lambda: len(twitch.shard_sessions()) == SHARDS // 2, LIMIT)
            during = 0
            while not await all_on({survivor.pid}):
                await say(first if during % 2 else joined, f"during-{during}")
                during += 1
                await asyncio.sleep(0.3)
            for n in range(4):
                await say(first, f"after-{n}")
            await say(joined, "after-joined")
            await twitch.wait_until(lambda: set(answered(twitch)) >= set(sent), LIMIT)
            assert during >= 3  # the takeover waited for the lapsed leases
            # answers to the last lines have gone out: a double answer would show by now
            assert answered(twitch) == Counter(sent)
            assert len(twitch.conduits) == 1
        finally:
            errs: dict[int, bytes] = {}
            for proc in procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGINT)
            for proc in procs:
                _, errs[proc.pid] = await stopped(proc)
                log = errs[proc.pid].decode(errors="replace")
                (tmp_path / f"chorus-{proc.pid}.log").write_text(log, encoding="utf-8")
                print(f"--- chorus {proc.pid} ---\n{log[-6000:]}")  # shown when the test fails
            for name in await real_redis.keys(f"chorus:v1:*:twitch:{app}*"):
                await real_redis.delete(name)
            conduit = await store.conduit(app)
            if conduit is not None:
                await real_redis.delete(
                    *await real_redis.keys(f"chorus:v1:conduit:twitch:{conduit}*")
                )
        logs = b"".join(errs.values()).decode(errors="replace")
        assert "has not granted this app" in logs and "/mod mybot" in logs, logs[-3000:]
        assert survivor.returncode == 0, errs[survivor.pid].decode(errors="replace")[-3000:]


async def test_a_gateway_restarted_with_another_shard_count_resizes_the_conduit_losing_no_line(
    tmp_path: Path, real_redis_url: str, real_redis: Redis, key_tag: str
) -> None:
    """Two gateways and a worker on a conduit of 2 shards. One gateway is restarted with
    ``TWITCH_CONDUIT_SHARDS=4``: it grows the conduit (Update Conduits), and every one of the 4
    shards gets a transport, spread over both gateways (the one left running learns the new
    count from the store). Then it is restarted with 3: the conduit shrinks and the 3 shards that
    stay are each on a socket. Chat is sent all along, through both restarts: every line is taken
    by an enabled shard and answered exactly once."""
    base = 8_100_000_000 + int(key_tag[1:], 16) % 10**8 * 10
    channel = (str(base + 1), "resized")
    tag = uuid.uuid4().hex[:6]
    # an application of its own: the conduit's record is per application, in a shared Redis
    async with AnthropicServer() as model, TwitchServer(client_id=f"app-{key_tag}") as twitch:
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(*channel)
        twitch.grant(BOT_ID, "access-0", "refresh-0", scopes=SCOPES)
        twitch.channel_bot.add(channel[0])
        twitch.keepalive_every = 5.0
        env = base_env(tmp_path) | twitch_env(twitch)
        env |= {
            "TWITCH_CLIENT_ID": twitch.client_id,
            "TWITCH_CHANNELS": channel[1],
            "TWITCH_TRANSPORT": "conduit",
            "TWITCH_CONDUIT_SHARDS": "2",
            "TWITCH_SHARD_LEASE_SECONDS": "3",
            "TWITCH_TOKEN_STORE": f"file:{tmp_path / 'tokens.json'}",
            "CHORUS_BUS": "redis",
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS_NAMESPACE": key_tag,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
        }
        store = RedisConduitStore(real_redis)
        app = env["TWITCH_CLIENT_ID"]
        sent: list[str] = []

        async def say(name: str) -> None:
            msg_id = f"{tag}-{name}"
            event = line(
                channel, msg_id, f"question {name}?", str(7_100_000 + len(sent)), mention=True
            )
            assert await twitch.notify(CHAT, event) == 1, f"no enabled shard took {msg_id}"
            sent.append(msg_id)

        async def spread(shards: int, pids: set[int]) -> bool:
            """The conduit has ``shards`` shards, each enabled on its own socket, and each held
            by one of ``pids`` (all of them holding some)."""
            conduit = await store.conduit(app)
            if conduit is None or [len(c.shards) for c in twitch.conduits.values()] != [shards]:
                return False
            held = await store.owners(conduit, shards)
            enabled = twitch.shard_sessions()
            return (
                len(held) == shards
                and {int(o.split(":")[1]) for o in held.values()} == pids
                and len(enabled) == shards == len(set(enabled.values()))
            )

        async def chat_until(done: object, what: str, name: str) -> int:
            """Send a line every 0.3 s until ``done()``; how many were sent."""
            assert callable(done)
            count = 0
            async with asyncio.timeout(LIMIT):
                while not await done():
                    await say(f"{name}-{count}")
                    count += 1
                    await asyncio.sleep(0.3)
            return count

        procs: list[asyncio.subprocess.Process] = []
        errs: dict[int, bytes] = {}
        gateway = ["run", "--role", "gateway"]
        try:
            gw1 = await spawn_chorus(gateway, env, tmp_path)
            procs.append(gw1)
            await _poll(lambda: spread(2, {gw1.pid}), "the first gateway on both shards")
            gw2 = await spawn_chorus(gateway, env, tmp_path)
            procs += [gw2, await spawn_chorus(["run", "--role", "worker"], env, tmp_path)]
            await _poll(lambda: spread(2, {gw1.pid, gw2.pid}), "a shard for each gateway")
            for n in range(4):
                await say(f"before-{n}")
            await twitch.wait_until(lambda: set(answered(twitch)) >= set(sent), LIMIT)

            # gw1 restarted with 4 shards: the conduit grows, both gateways take new shards
            gw1.send_signal(signal.SIGINT)
            _, errs[gw1.pid] = await stopped(gw1)
            gw3 = await spawn_chorus(gateway, env | {"TWITCH_CONDUIT_SHARDS": "4"}, tmp_path)
            procs.append(gw3)
            grown = await chat_until(lambda: spread(4, {gw2.pid, gw3.pid}), "grown", "grow")
            assert grown >= 1
            grows = [
                r for r in twitch.requests if r.method == "PATCH" and r.path.endswith("/conduits")
            ]
            assert [r.query.get("shard_count") for r in grows] == ["4"]

            # gw3 restarted with 3 shards: the conduit shrinks; the 3 that stay each on a socket
            gw3.send_signal(signal.SIGINT)
            _, errs[gw3.pid] = await stopped(gw3)
            gw4 = await spawn_chorus(gateway, env | {"TWITCH_CONDUIT_SHARDS": "3"}, tmp_path)
            procs.append(gw4)
            shrunk = await chat_until(lambda: spread(3, {gw2.pid, gw4.pid}), "shrunk", "shrink")
            assert shrunk >= 1
            for n in range(4):
                await say(f"after-{n}")
            await twitch.wait_until(lambda: set(answered(twitch)) >= set(sent), LIMIT)
            await asyncio.wait_for(until_drained(real_redis, key_tag, "twitch"), LIMIT)
            assert answered(twitch) == Counter(sent)  # every line once, none lost or doubled
            assert len(twitch.conduits) == 1
            assert await store.size(str(await store.conduit(app))) == 3
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGINT)
            for proc in procs:
                if proc.pid not in errs:
                    _, errs[proc.pid] = await stopped(proc)
                log = errs[proc.pid].decode(errors="replace")
                print(f"--- chorus {proc.pid} ---\n{log[-6000:]}")  # shown when the test fails
            for name in await real_redis.keys(f"chorus:v1:*:twitch:{app}*"):
                await real_redis.delete(name)
            conduit = await store.conduit(app)
            if conduit is not None:
                await real_redis.delete(
                    *await real_redis.keys(f"chorus:v1:conduit:twitch:{conduit}*")
                )
        logs = b"".join(errs.values()).decode(errors="replace")
        assert "twitch conduit resized" in logs and "twitch conduit size changed" in logs
        assert all(p.returncode == 0 for p in procs), logs[-3000:]
