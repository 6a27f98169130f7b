"""The round-trip counter the budget tests and the benchmark rely on."""

from __future__ import annotations

from bot.state import connect, keys
from tests.roundtrips import counting_round_trips


async def test_a_new_connections_handshake_is_not_a_round_trip_of_the_work(
    real_redis_url: str,
) -> None:
    client = await connect.open_redis(real_redis_url)
    try:
        await client.connection_pool.disconnect()  # the next command opens a new connection
        with counting_round_trips() as trips:
            await client.ping()
            async with client.pipeline(transaction=True) as pipe:
                pipe.get("chorus:test:roundtrips")
                pipe.get("chorus:test:roundtrips")
                await pipe.execute()
        assert trips.count == 2  # the PING, the whole pipeline
        assert trips.handshakes, "the new connection's HELLO/SELECT were seen, apart"
        assert all(not w.upper().startswith(b"*2\r\n$5\r\nHELLO") for w in trips.writes)
    finally:
        await client.aclose()


async def test_a_turns_writes_leave_out_only_the_log_streams_own(real_redis_url: str) -> None:
    client = await connect.open_redis(real_redis_url)
    logs, other = keys.log_lines("rt_test"), "chorus:test:roundtrips:stream"
    try:
        with counting_round_trips() as trips:
            await client.xadd(logs, {"line": "a warning"}, maxlen=10, approximate=True)
            await client.xadd(other, {"line": "not a log line"})
            for transaction in (True, False):
                async with client.pipeline(transaction=transaction) as pipe:
                    pipe.xadd(logs, {"line": "inside a pipeline of the turn"})
                    pipe.get("chorus:test:roundtrips")
                    await pipe.execute()
        assert trips.count == 4
        # the lone log-stream XADD is left out; pipelines that carry one as well are not
        assert len(trips.turn) == 3
        assert [w.count(b"XADD") for w in trips.turn] == [1, 1, 1]
    finally:
        await client.delete(logs, other)
        await client.aclose()
