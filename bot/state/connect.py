"""Redis connections from one URL (CHORUS_REDIS_URL), real or embedded.

``embedded://`` (the default) needs no server: it is the embedded store (``bot.state.embedded``),
a Redis-compatible store inside the process kept on disk in the data directory, so ``make run``
works out of the box and remembers across restarts. One process uses a data directory at a
time. ``memory://`` is the same store without the disk: everything is forgotten at exit (tests
and experiments), and tests run the same code as production. ``memory://NAME``
names one store per process: every client connected to the same name sees the same data (the
router and the insights worker of one process share state), different names are isolated, and
the data lives as long as the process. Bare ``memory://`` is the process's default store; an
optional ``/N`` path selects database N, as for Redis.

``redis://``, ``rediss://`` and ``unix://`` go to redis-py's ``from_url``.
``redis+cluster://host:port[,host:port...]`` (``rediss+cluster://`` with TLS) opens redis-py's
``RedisCluster`` from those startup nodes (it learns the rest of the cluster from them) and
switches the key catalogue to its cluster layout (``bot.state.keys.use_cluster_layout``: hash
tags where operations combine keys); docs/scaling.md "Redis Cluster" says what changes.
``redis+sentinel://sentinel:26379[,sentinel:26379...]/SERVICE[/DB]`` asks those Redis
Sentinels for the primary of SERVICE (redis-py's ``Sentinel.master_for``) and follows it
through a failover; the keys are the single-node ones. Both kinds decode
responses to ``str``. ``connect`` pings once, so a wrong host fails at startup with a message
naming CHORUS_REDIS_URL (password masked), not at the first message with a traceback.

Whoever calls ``connect`` owns the client and closes it: ``await client.aclose()`` (or
``async with client:``).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, cast
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis, RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel
from redis.backoff import ExponentialWithJitterBackoff
from redis.exceptions import RedisError

from bot.settings import ConfigError, StateSettings, check_redis_url
from bot.settings.state import (
    CLUSTER_SCHEMES,
    SENTINEL_SCHEMES,
    cluster_nodes,
    sentinel_service,
)
from bot.state import keys

if TYPE_CHECKING:
    import fakeredis

log = logging.getLogger("chorus.store")

StoreError = RedisError
"""What a failed store step raises (a refused connection, a timeout, an error reply)."""

Client = Redis
"""A connection to the state store: a redis-py client, of a server or of the embedded store.
Code outside ``bot.state``, ``bot.bus`` and ``bot.ops`` only opens it, hands it to the stores
that take one and closes it; it sends no command of its own (``tests/test_state_seam.py``)."""

VARIABLE = "CHORUS_REDIS_URL"
EXAMPLE = "embedded:// (kept in CHORUS_DATA_DIR), memory:// or redis://127.0.0.1:6379/0"

# A few quick retries ride over a blip (failover, restart); longer outages surface as errors the
# caller handles instead of stalling every message for seconds.
_RETRIES = 3
_PING_TIMEOUT = 2.0

_QUERY_PASSWORD = re.compile(r"(?i)([?&]password=)[^&#]*")

_memory_servers: dict[str, fakeredis.FakeServer] = {}
_memory_lock = threading.Lock()


class StoreUnavailable(ConfigError):
    """The URL is well-formed but the Redis there did not answer (or refused us)."""


async def open_state(state: StateSettings) -> Redis:
    """A connected client for the settings' store (``open_redis`` with their data directory)."""
    return await open_redis(
        state.redis_url,
        data_dir=state.state_path(),
        compact_minutes=state.data_compact_minutes,
    )


async def open_redis(
    url: str,
    *,
    connect_timeout: float = 5.0,
    data_dir: Path | None = None,
    compact_minutes: float = 10,
) -> Redis:
    """A connected client for ``url``; raises ``ConfigError`` if it is malformed or unreachable.

    ``connect_timeout`` bounds the TCP connect and the first PING, so a black-holed host fails
    at startup instead of hanging it. ``data_dir``: where ``embedded://`` keeps its files
    (``CHORUS_DATA_DIR/state``); ``compact_minutes``: how often it compacts them.
    """
    try:
        check_redis_url(url)
    except ValueError as exc:
        raise ConfigError(
            f"{VARIABLE}={mask_url(url)!r} is invalid: {exc}; use {EXAMPLE}"
        ) from None
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return _memory_client(parts.netloc, parts.path)
    if parts.scheme == "embedded":
        if data_dir is None:
            raise ConfigError(f"{VARIABLE}=embedded:// needs the data directory (CHORUS_DATA_DIR)")
        return await _persistent_client(data_dir, compact_minutes)
    try:
        if parts.scheme in CLUSTER_SCHEMES:
            client = _cluster_client(url, connect_timeout)
        elif parts.scheme in SENTINEL_SCHEMES:
            client = _sentinel_client(url, connect_timeout)
        else:
            client = Redis.from_url(
                url,
                decode_responses=True,
                socket_connect_timeout=connect_timeout,
                retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), _RETRIES),
            )
    except (ValueError, TypeError) as exc:  # bad query-string options, e.g. ?db=x
        message = _scrub(str(exc), parts.password)
        raise ConfigError(f"{VARIABLE}={mask_url(url)!r} is invalid: {message}") from None
    try:
        async with asyncio.timeout(connect_timeout):
            await client.ping()
    except (RedisError, OSError, TimeoutError) as exc:
        await client.aclose()
        reason = (
            f"no answer within {connect_timeout:g}s" if isinstance(exc, TimeoutError) else str(exc)
        )
        reason = _scrub(reason.rstrip(". ") or type(exc).__name__, parts.password)
        raise StoreUnavailable(
            f"cannot use the Redis at {VARIABLE}={mask_url(url)}: {reason}; start Redis there, "
            "fix the URL (host, port, password), or use embedded:// for the embedded store"
        ) from None
    return client


async def ping(client: Redis) -> bool:
    """Health check: True when the store answers within a couple of seconds."""
    try:
        async with asyncio.timeout(_PING_TIMEOUT):
            return bool(await client.ping())
    except (RedisError, OSError, TimeoutError):
        log.debug("redis ping failed", exc_info=True)
        return False


def mask_url(url: str) -> str:
    """``url`` with its password (in the userinfo or a ``password=`` option) replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "(unparsable URL)"
    if password:
        userinfo, _, hostinfo = parts.netloc.rpartition("@")
        url = urlunsplit(parts._replace(netloc=f"{userinfo.partition(':')[0]}:***@{hostinfo}"))
    return _QUERY_PASSWORD.sub(r"\1***", url)


def _cluster_client(url: str, connect_timeout: float) -> Redis:
    """A ``RedisCluster`` from a ``redis+cluster://`` URL's nodes, its keys in the cluster layout.
    Typed as ``Redis``: the stores send it the same commands (``client.is_cluster`` tells)."""
    parts = urlsplit(url)
    keys.use_cluster_layout(True)
    cluster = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in cluster_nodes(url)],
        username=parts.username or None,
        password=parts.password or None,
        ssl=parts.scheme == "rediss+cluster",
        decode_responses=True,
        socket_connect_timeout=connect_timeout,
        retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), _RETRIES),
    )
    return cast("Redis", cluster)


def _sentinel_client(url: str, connect_timeout: float) -> Redis:
    """The primary of a ``redis+sentinel://`` URL's service: redis-py's Sentinel asks the
    sentinels where it is before each new connection and drops the old primary's connections
    after a failover, so the stores ride a failover like a restart (the retries below, then
    ``bot.state.outages``' backoff)."""
    parts = urlsplit(url)
    service, db = sentinel_service(url)
    sentinel = Sentinel(  # type: ignore[no-untyped-call]
        cluster_nodes(url, default_port=26379, path_is_db=False),
        socket_connect_timeout=connect_timeout,
        socket_timeout=connect_timeout,
    )
    primary: Redis = sentinel.master_for(
        service,
        username=parts.username or None,
        password=parts.password or None,
        db=db,
        ssl=parts.scheme == "rediss+sentinel",
        decode_responses=True,
        socket_connect_timeout=connect_timeout,
        retry=Retry(ExponentialWithJitterBackoff(base=0.05, cap=1.0), _RETRIES),
    )
    return primary


def _memory_client(name: str, path: str) -> Redis:
    db_text = path.strip("/")
    if db_text and not db_text.isdigit():
        raise ConfigError(
            f"{VARIABLE}=memory://{name}{path}: the path must be a database number "
            "(memory://NAME/0) or empty"
        )
    import fakeredis  # here: a deployment on a real Redis never loads the embedded store

    from bot.state import embedded

    with _memory_lock:
        server = _memory_servers.get(name)
        if server is None:
            server = _memory_servers[name] = fakeredis.FakeServer()
    return embedded.client(server, int(db_text or 0))


async def _persistent_client(directory: Path, compact_minutes: float) -> Redis:
    from bot.state import embedded  # here: a deployment on a real Redis never loads it

    try:
        store = await asyncio.to_thread(
            embedded.persistent, directory, compact_seconds=compact_minutes * 60
        )
    except OSError as exc:
        raise ConfigError(
            f"cannot keep the embedded store's files in {directory}: {exc.strerror or exc}; set "
            "CHORUS_DATA_DIR to a directory this user may write"
        ) from None
    return embedded.client(store.server, 0)


def _scrub(text: str, password: str | None) -> str:
    return text.replace(password, "***") if password else text
