"""``bot.llm.transport``: the pool's rules, against raw servers on real sockets.

Limits, waiting for room, idle expiry, reuse newest first, what happens to a connection whose
answer was left unread or whose request was cancelled, and closing. Connections are counted on
the server's side (accepted, and ended by the client); HTTP framing itself is
``tests/test_http1.py``.
"""

from __future__ import annotations

import asyncio

import httpx2
import pytest

from bot.llm import transport
from tests.netio_rig import Script, ok, serve


def _client(
    max_connections: int | None = 10, max_idle: int | None = 10, expiry: float | None = 5.0
) -> httpx2.AsyncClient:
    limits = httpx2.Limits(
        max_connections=max_connections,
        max_keepalive_connections=max_idle,
        keepalive_expiry=expiry,
    )
    return httpx2.AsyncClient(transport=transport.transport(limits), timeout=5)


def _pool(client: httpx2.AsyncClient) -> transport.Transport:
    pool = client._transport
    assert isinstance(pool, transport.Transport)
    return pool


async def _eventually(check: object, what: str) -> None:
    """Wait (up to 5 s of loop passes) until ``check()`` is true."""
    assert callable(check)
    for _ in range(500):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def test_with_room_for_one_connection_concurrent_requests_take_turns_on_it() -> None:
    script = Script([ok(b"1"), ok(b"2"), ok(b"3")], pause=0.02)
    site = await serve(script)
    async with site.server, _client(max_connections=1) as client:
        answers = await asyncio.gather(*(client.get(site.url) for _ in range(3)))
    assert sorted(a.content for a in answers) == [b"1", b"2", b"3"]
    assert len(site.accepted) == 1


async def test_no_room_within_the_pool_timeout_is_a_pool_timeout_and_the_room_comes_back() -> None:
    site = await serve(Script([ok(b"held"), ok(b"after")]))
    async with site.server, _client(max_connections=1) as client:
        held = await client.send(client.build_request("GET", site.url), stream=True)
        with pytest.raises(httpx2.PoolTimeout):
            await client.get(site.url, timeout=httpx2.Timeout(5, pool=0.1))
        assert await held.aread() == b"held"
        await held.aclose()
        assert (await client.get(site.url)).content == b"after"
    assert len(site.accepted) == 1


async def test_a_full_pool_closes_an_idle_connection_to_another_origin_to_make_room() -> None:
    first, second = Script([ok(b"a")]), Script([ok(b"b")])
    site_a, site_b = await serve(first), await serve(second)
    async with site_a.server, site_b.server, _client(max_connections=1) as client:
        assert (await client.get(site_a.url)).content == b"a"
        assert (await client.get(site_b.url)).content == b"b"
        await _eventually(lambda: first.ended, "the idle connection to A closed")
        assert not second.ended


async def test_idle_connections_above_the_keepalive_limit_are_closed_oldest_first() -> None:
    script = Script([ok(b"%d" % n) for n in range(4)], pause=0.05)
    site = await serve(script)
    async with site.server, _client(max_idle=1) as client:
        await asyncio.gather(*(client.get(site.url) for _ in range(3)))  # three at once
        assert len(site.accepted) == 3
        await _eventually(lambda: len(script.ended) == 2, "two of three idle ones closed")
        assert (await client.get(site.url)).content == b"3"  # on the one kept
    assert len(site.accepted) == 3


async def test_an_idle_connection_past_its_expiry_is_closed_not_reused() -> None:
    script = Script([ok(b"1"), ok(b"2")])
    site = await serve(script)
    async with site.server, _client(expiry=0.1) as client:
        await client.get(site.url)
        await asyncio.sleep(0.3)
        assert (await client.get(site.url)).content == b"2"
        assert len(site.accepted) == 2
        await _eventually(lambda: script.ended, "the expired connection closed")


async def test_the_newest_idle_connection_is_reused_first() -> None:
    site = await serve(Script([ok(b"a"), ok(b"b"), ok(b"c")]))
    async with site.server, _client() as client:
        held = await client.send(client.build_request("GET", site.url), stream=True)
        other = await client.get(site.url)  # a second connection, idle first
        await held.aread()
        await held.aclose()  # idle last: the newest
        again = await client.get(site.url)
    assert other.extensions["network_stream"] is not held.extensions["network_stream"]
    assert again.extensions["network_stream"] is held.extensions["network_stream"]


async def test_an_answer_left_unread_closes_its_connection() -> None:
    body = b"unread" * 1000
    head = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body)
    script = Script([[head, body], ok(b"next")], pause=0.2)  # the body comes after the head
    site = await serve(script)
    async with site.server, _client() as client:
        async with client.stream("GET", site.url):
            pass  # closed without reading the body, before it even arrived
        assert (await client.get(site.url)).content == b"next"
        await _eventually(lambda: script.ended, "the abandoned connection closed")
    assert len(site.accepted) == 2


async def test_a_cancelled_request_closes_its_connection_and_frees_its_room() -> None:
    script = Script([[], ok(b"next")])  # the first request is never answered
    site = await serve(script)
    async with site.server, _client(max_connections=1) as client:
        pending = asyncio.ensure_future(client.get(site.url))
        await _eventually(lambda: script.requests, "the first request arrived")
        pending.cancel()
        with pytest.raises(asyncio.CancelledError):
            await pending
        assert (await client.get(site.url)).content == b"next"
        assert not _pool(client)._waiters
    assert len(site.accepted) == 2


async def test_a_waiter_cancelled_after_it_was_woken_passes_the_room_on() -> None:
    site = await serve(Script([ok(b"held"), ok(b"second")]))
    async with site.server, _client(max_connections=1) as client:
        pool = _pool(client)
        held = await client.send(client.build_request("GET", site.url), stream=True)
        first = asyncio.ensure_future(client.get(site.url))
        second = asyncio.ensure_future(client.get(site.url))
        await _eventually(lambda: len(pool._waiters) == 2, "both wait for room")
        await held.aread()
        await held.aclose()  # the room is handed to the first waiter ...
        first.cancel()  # ... which leaves before it ever runs
        assert (await asyncio.wait_for(second, 5)).content == b"second"
        with pytest.raises(asyncio.CancelledError):
            await first


async def test_closing_the_client_closes_its_idle_connections() -> None:
    script = Script([ok()])
    site = await serve(script)
    async with site.server:
        async with _client() as client:
            await client.get(site.url)
        await _eventually(lambda: script.ended, "the server saw the close")
        with pytest.raises(RuntimeError, match="closed"):
            await _pool(client).handle_async_request(httpx2.Request("GET", site.url))


async def test_a_url_that_is_not_http_is_refused() -> None:
    pool = transport.transport()
    with pytest.raises(httpx2.UnsupportedProtocol):
        await pool.handle_async_request(httpx2.Request("GET", "ftp://127.0.0.1/file"))
    await pool.aclose()


async def test_a_refused_connect_leaves_no_room_taken() -> None:
    async with _client(max_connections=1) as client:
        for _ in range(2):
            with pytest.raises(httpx2.ConnectError):
                await client.get("http://127.0.0.1:9/")
        pool = _pool(client)
        assert (pool._open, pool._connecting) == (set(), 0)
