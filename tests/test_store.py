"""Connections: the embedded store, named sharing, URL errors, and no password in any error."""

from __future__ import annotations

import logging
import socket
import traceback
import uuid
from urllib.parse import urlsplit, urlunsplit

import pytest
from redis.asyncio import Redis

from bot.settings import ConfigError
from bot.state import connect


def chained_messages(exc: BaseException) -> str:
    """What a traceback of ``exc`` would print about it and every exception chained to it."""
    text, seen = "", exc
    while seen is not None:
        text += "".join(traceback.format_exception_only(seen))
        seen = seen.__cause__ or seen.__context__  # type: ignore[assignment]
    return text


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


async def test_memory_store_needs_no_server(key_tag: str) -> None:
    client = await connect.open_redis(f"memory://{key_tag}")
    try:
        assert await connect.ping(client)
        await client.set("k", "v")
        assert await client.get("k") == "v"  # decoded to str, as for a real server
    finally:
        await client.aclose()


async def test_memory_name_is_shared_within_the_process(key_tag: str) -> None:
    first = await connect.open_redis(f"memory://shared-{key_tag}")
    await first.set("greeting", "hello")
    await first.aclose()  # the data belongs to the named store, not to a client
    second = await connect.open_redis(f"memory://shared-{key_tag}")
    other = await connect.open_redis(f"memory://other-{key_tag}")
    other_db = await connect.open_redis(f"memory://shared-{key_tag}/1")
    try:
        assert await second.get("greeting") == "hello"
        assert await other.get("greeting") is None
        assert await other_db.get("greeting") is None
    finally:
        for client in (second, other, other_db):
            await client.aclose()


async def test_bare_memory_url_is_the_process_default_store(key_tag: str) -> None:
    a, b = await connect.open_redis("memory://"), await connect.open_redis("memory://")
    try:
        await a.set(key_tag, "1")
        assert await b.get(key_tag) == "1"
    finally:
        await a.delete(key_tag)
        await a.aclose()
        await b.aclose()


@pytest.mark.parametrize(
    "url",
    [
        "redis//x",
        "http://x",
        "redis://",
        "redis://h:notaport",
        "redis://h:6379/abc",
        "",
        "unix://",
        "memory://name/abc",
        "embedded://name",
        "embedded:///3",
    ],
)
async def test_malformed_url_names_the_variable_and_an_example(url: str) -> None:
    with pytest.raises(ConfigError) as info:
        await connect.open_redis(url)
    message = str(info.value)
    assert "CHORUS_REDIS_URL" in message
    assert "memory://" in message


async def test_the_embedded_store_needs_its_data_directory() -> None:
    with pytest.raises(ConfigError, match="CHORUS_DATA_DIR"):
        await connect.open_redis("embedded://")


async def test_bad_query_option_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="CHORUS_REDIS_URL"):
        await connect.open_redis(f"redis://127.0.0.1:{closed_port()}/0?socket_timeout=soon")


async def test_unreachable_server_is_a_clear_error_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    port, secret = closed_port(), f"s3cret{uuid.uuid4().hex}"
    with pytest.raises(connect.StoreUnavailable) as info:
        await connect.open_redis(f"redis://:{secret}@127.0.0.1:{port}/0", connect_timeout=2)
    message = str(info.value)
    assert f"CHORUS_REDIS_URL=redis://:***@127.0.0.1:{port}/0" in message
    assert "embedded://" in message
    assert isinstance(info.value, ConfigError)  # the CLI prints it without a traceback
    assert secret not in "".join(traceback.format_exception(info.value))
    assert "s3cret" not in chained_messages(info.value)
    assert "s3cret" not in caplog.text


@pytest.mark.redis
async def test_rejected_credentials_on_a_real_server_are_masked(real_redis_url: str) -> None:
    parts = urlsplit(real_redis_url)
    netloc = f"chorus-nobody:s3cret-pw@{parts.hostname}:{parts.port}"
    with pytest.raises(connect.StoreUnavailable) as info:
        await connect.open_redis(urlunsplit(parts._replace(netloc=netloc)))
    message = str(info.value)
    assert "chorus-nobody:***@" in message
    assert "s3cret-pw" not in chained_messages(info.value)


@pytest.mark.redis
async def test_connected_client_answers_and_decodes(redis_client: Redis, key_tag: str) -> None:
    assert await connect.ping(redis_client)
    await redis_client.set(f"chorus-test:{key_tag}", "é")
    assert await redis_client.get(f"chorus-test:{key_tag}") == "é"


async def test_ping_is_false_when_nothing_answers() -> None:
    client = Redis.from_url(f"redis://127.0.0.1:{closed_port()}/0", retry=None)
    try:
        assert await connect.ping(client) is False
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    ("url", "masked"),
    [
        ("redis://:pw@h:6379/0", "redis://:***@h:6379/0"),
        ("rediss://user:pw@h/1", "rediss://user:***@h/1"),
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("memory://x", "memory://x"),
        ("unix:///run/redis.sock?db=1&password=pw", "unix:///run/redis.sock?db=1&password=***"),
    ],
)
def test_mask_url(url: str, masked: str) -> None:
    assert connect.mask_url(url) == masked
