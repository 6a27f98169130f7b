"""The round-trip counter the budget tests and the benchmark rely on."""

from __future__ import annotations

from bot.state import connect
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
