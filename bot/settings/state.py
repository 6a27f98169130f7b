"""Where state lives (the embedded store or a Redis server), the bus, and how much history.

The URL is checked here, when settings load, so a typo fails at start with the variable named
rather than at the first connection attempt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qs, urlsplit

from pydantic import Field, SecretStr, field_validator

from bot.settings.base import Section

CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
REDIS_SCHEMES = (
    "embedded",
    "memory",
    "redis",
    "rediss",
    "unix",
    *CLUSTER_SCHEMES,
    *SENTINEL_SCHEMES,
)
EMBEDDED_SCHEMES = ("embedded", "memory")


class StateSettings(Section):
    redis_url: str = Field(
        default="embedded://",
        validation_alias="CHORUS_REDIS_URL",
        description=(
            "Where state lives: embedded:// (the default: the store inside the process, kept "
            "on disk in CHORUS_DATA_DIR/state), memory:// (inside the process, forgotten at "
            "exit: tests and experiments), a Redis server (redis://host:6379/0) or a Redis "
            "Cluster (redis+cluster://host:7000,host:7001: any of its nodes, comma-separated; "
            "rediss+cluster:// for TLS) or a primary watched by Redis Sentinel "
            "(redis+sentinel://host:26379,host:26379/SERVICE[/DB]: the sentinels and the "
            "monitored service's name; a password in the URL is the primary's)"
        ),
    )
    data_compact_minutes: float = Field(
        default=10,
        gt=0,
        le=24 * 60,
        validation_alias="CHORUS_DATA_COMPACT_MINUTES",
        description=(
            "How often the embedded store rewrites its snapshot and empties its change log; "
            "data deleted, forgotten or expired is in no file of the data directory after it"
        ),
    )
    bus: Literal["memory", "redis"] = Field(default="memory", validation_alias="CHORUS_BUS")
    """The event bus: `memory` (in-process) or `redis` (Redis Streams, for several processes; needs
    a Redis server)."""
    bus_namespace: str = Field(
        default="main", pattern=r"^[a-z0-9_]+$", validation_alias="CHORUS_BUS_NAMESPACE"
    )
    """Names this deployment's streams, ledgers and audit trail in Redis, so deployments can share
    one server."""
    # How long the Redis Streams bus keeps an entry (bot/bus/retention.py); at least 10 minutes,
    # since an entry older than this is trimmed even if no worker has read it yet.
    bus_retention_seconds: int = Field(
        default=24 * 3600, ge=600, validation_alias="CHORUS_BUS_RETENTION"
    )
    """Seconds the Redis Streams bus keeps an entry (at least 600)."""
    max_deliveries: int = Field(default=3, ge=1, le=100, validation_alias="CHORUS_MAX_DELIVERIES")
    """Deliveries of one inbound message before it goes to the `dead_letters` topic instead of
    another worker."""
    # How long a worker's hold on a message (claim) and on a bus partition lasts without
    # renewal: a worker that dies stalls its messages for about this long (renewed every third
    # of a lease while it lives). Shorter means faster takeover and more renewal traffic.
    claim_lease_ms: int = Field(
        default=10_000, ge=1_000, le=600_000, validation_alias="CHORUS_CLAIM_LEASE_MS"
    )
    """How long a worker's hold on a message lasts unrenewed: a dead worker's messages wait about
    this long for another worker."""
    partition_lease_ms: int = Field(
        default=5_000, ge=2_000, le=600_000, validation_alias="CHORUS_PARTITION_LEASE_MS"
    )
    """How long a worker's hold on a bus partition lasts unrenewed."""
    # Where the files of a process live (the embedded store's state, the gateway's spool):
    # absolute, never the working directory; empty: $XDG_DATA_HOME/chorus, else
    # ~/.local/share/chorus (``data_path``).
    data_dir: str = Field(default="", validation_alias="CHORUS_DATA_DIR")
    """Where a process keeps its files (the embedded store's state, the gateway's spool); a relative
    path is made absolute once, at start. Unset: `$XDG_DATA_HOME/chorus`, else
    `~/.local/share/chorus`."""
    # The gateway's ordered outbox on the Redis Streams bus (bot/bus/outbox.py): how many
    # events it holds before adapters wait, how long it publishes at shutdown, and where it
    # spools what is left (relative to the data directory; a volume in a container), signed
    # with a key derived from CHORUS_SPOOL_SECRET or the deployment's secrets
    # (bot/bus/spool_key.py); files that could not be read back are kept this many seconds.
    outbox_limit: int = Field(default=10_000, ge=1, validation_alias="CHORUS_OUTBOX_LIMIT")
    """The gateway on the Redis Streams bus: messages it holds while Redis is away before the
    platforms are made to wait."""
    outbox_flush_seconds: float = Field(
        default=5.0, ge=0, le=600, validation_alias="CHORUS_OUTBOX_FLUSH_SECONDS"
    )
    """Seconds a stopping gateway keeps publishing the messages it holds before it spools the rest.
    """
    spool_dir: str = Field(default="spool", min_length=1, validation_alias="CHORUS_SPOOL_DIR")
    """Where a stopping gateway writes the messages Redis has not taken yet, for its next start to
    send first; relative to `CHORUS_DATA_DIR` (a volume in a container)."""
    spool_secret: SecretStr | None = Field(default=None, validation_alias="CHORUS_SPOOL_SECRET")
    """What the key signing every spooled record is derived from; unset: the deployment's secrets
    (model keys, platform tokens, the Redis password)."""
    spool_corrupt_retention: int = Field(
        default=7 * 24 * 3600, ge=0, validation_alias="CHORUS_SPOOL_CORRUPT_RETENTION"
    )
    """Seconds a spool file that was refused or could not be read back (`corrupt-...`) is kept
    before it is deleted."""
    history_max_messages: int = Field(default=40, ge=2, validation_alias="CHORUS_HISTORY_MAX")
    """Messages of history kept per conversation (what the prompt carries)."""
    history_ttl_seconds: int = Field(
        default=7 * 24 * 3600, ge=60, validation_alias="CHORUS_HISTORY_TTL"
    )
    """Seconds a conversation's history lives after its last message."""

    @field_validator("redis_url")
    @classmethod
    def _check_redis_url(cls, value: str) -> str:
        check_redis_url(value)
        return value

    def secret_values(self) -> list[str]:
        """The Redis password, wherever the URL carries it, and the spool's secret."""
        parts = urlsplit(self.redis_url)
        found = [p for p in (parts.password, *parse_qs(parts.query).get("password", [])) if p]
        spool = self.spool_secret.get_secret_value() if self.spool_secret else ""
        return found + ([spool] if spool else [])

    def data_path(self) -> Path:
        """The data directory, absolute: CHORUS_DATA_DIR (a relative one is made absolute
        against the working directory once, here), else $XDG_DATA_HOME/chorus, else
        ~/.local/share/chorus (without a home directory: ``.chorus`` in the working directory at
        start, made absolute)."""
        if self.data_dir.strip():
            return Path(self.data_dir.strip()).expanduser().absolute()
        xdg = os.environ.get("XDG_DATA_HOME", "")
        if xdg and Path(xdg).is_absolute():
            return Path(xdg) / "chorus"
        try:
            return Path.home().absolute() / ".local" / "share" / "chorus"
        except RuntimeError:  # no home directory (an arbitrary uid in a container)
            return Path.cwd() / ".chorus"

    def is_embedded(self) -> bool:
        """The store lives inside this process (``embedded://`` or ``memory://``)."""
        return urlsplit(self.redis_url).scheme in EMBEDDED_SCHEMES

    def state_path(self) -> Path:
        """Where the embedded store keeps its files: ``state`` in the data directory."""
        return self.data_path() / "state"

    def spool_path(self) -> Path:
        """The gateway's spool directory: CHORUS_SPOOL_DIR, relative to the data directory."""
        return self.data_path() / Path(self.spool_dir).expanduser()


def cluster_nodes(
    value: str, *, default_port: int = 6379, path_is_db: bool = True
) -> list[tuple[str, int]]:
    """The ``(host, port)`` of each node a ``redis+cluster://`` URL names (port 6379 by
    default), or each sentinel of a ``redis+sentinel://`` one (``default_port`` 26379)."""
    hostinfo = urlsplit(value).netloc.rpartition("@")[2]
    nodes: list[tuple[str, int]] = []
    for node in hostinfo.split(","):
        node = node.strip()
        host, _, port = node.rpartition(":") if ":" in node else (node, "", str(default_port))
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(
                f"a cluster node must be host:port, got {node!r} "
                "(e.g. redis+cluster://10.0.0.1:7000,10.0.0.2:7000)"
            )
        nodes.append((host, int(port)))
    if path_is_db and urlsplit(value).path.strip("/") not in ("", "0"):
        raise ValueError("a Redis Cluster has database 0 only")
    return nodes


def sentinel_service(value: str) -> tuple[str, int]:
    """The monitored service's name and the database of a ``redis+sentinel://`` URL."""
    service, _, db = urlsplit(value).path.strip("/").partition("/")
    if not service or not db.isdigit() and db:
        raise ValueError(
            "a Sentinel URL names the service and optionally the database after the "
            "sentinels, e.g. redis+sentinel://10.0.0.1:26379,10.0.0.2:26379/mymaster/0"
        )
    return service, int(db or 0)


def check_redis_url(value: str) -> None:
    try:
        parts = urlsplit(value)
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a URL ({exc})") from None
    if parts.scheme not in REDIS_SCHEMES:
        raise ValueError(
            f"scheme {parts.scheme or '(none)'!r} is not supported; use embedded:// (kept in "
            "CHORUS_DATA_DIR), memory:// (forgotten at exit), redis://host:6379/0, "
            "rediss://host:6380/0, unix:///path/to/redis.sock or "
            "redis+cluster://host:7000,host:7001"
        )
    if parts.scheme in CLUSTER_SCHEMES:
        cluster_nodes(value)
        return
    if parts.scheme in SENTINEL_SCHEMES:
        sentinel_service(value)
        cluster_nodes(value, default_port=26379, path_is_db=False)
        return
    if parts.scheme in ("redis", "rediss") and not parts.hostname:
        raise ValueError("a redis:// URL needs a host, e.g. redis://127.0.0.1:6379/0")
    if parts.scheme == "embedded" and (parts.netloc or parts.path.strip("/")):
        raise ValueError(
            "embedded:// takes no name or path: its files are in CHORUS_DATA_DIR/state "
            "(set CHORUS_DATA_DIR to move them)"
        )
    if parts.scheme == "unix" and not parts.path:
        raise ValueError("a unix:// URL needs a socket path, e.g. unix:///run/redis.sock")
    try:
        _ = parts.port
    except ValueError:
        raise ValueError("the port is not a number between 0 and 65535") from None
    db = parts.path.lstrip("/") if parts.scheme in ("redis", "rediss") else ""
    if db and not db.isdigit():
        raise ValueError(f"the database must be a number, got {db!r} (e.g. redis://host:6379/0)")
