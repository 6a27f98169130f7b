"""Copy every key of the embedded store to a Redis server: the move from ``embedded://`` to Redis.

``python -m bot.state.copy redis://host:6379/0`` reads the data directory of the settings
(``CHORUS_DATA_DIR``, so run it with the bot stopped: the directory is locked while it runs)
and writes each key to the server with the same type, content and expiry, replacing a key of
the same name there. ``DUMP``/``RESTORE`` cannot carry them: the embedded store's payloads are
fakeredis's encoding, not Redis's, so each type is read and written with its own commands.
A stream's entries and consumer groups (each at its last delivered id) are copied; entries a
consumer had read but not acknowledged are not pending on the server (the Redis Streams bus
needs a server anyway, so the embedded store holds none of its streams). A Redis Cluster is
refused: its layout tags some names (``bot.state.keys.use_cluster_layout``), which a copy of
names as they are would miss.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from bot.settings import ConfigError, load_settings
from bot.state import embedded
from bot.state.client import Redis
from bot.state.connect import mask_url, open_redis


async def copy_key(src: Redis, dst: Redis, key: bytes) -> bool:
    """``key`` from ``src`` to ``dst`` (replacing it there); False when it had gone."""
    reader: Any = src  # redis-py's stubs describe decoded replies; these are bytes
    found = await reader.type(key)
    kind = found.decode() if isinstance(found, bytes) else str(found)
    expires = await reader.pexpiretime(key)
    async with dst.pipeline(transaction=True) as pipe:
        pipe.delete(key)
        if kind == "string":
            pipe.set(key, await reader.get(key) or b"")
        elif kind == "hash":
            pipe.hset(key, mapping=await reader.hgetall(key))
        elif kind == "list":
            pipe.rpush(key, *await reader.lrange(key, 0, -1))
        elif kind == "set":
            pipe.sadd(key, *await reader.smembers(key))
        elif kind == "zset":
            pipe.zadd(key, dict(await reader.zrange(key, 0, -1, withscores=True)))
        elif kind == "stream":
            for entry_id, fields in await reader.xrange(key):
                pipe.xadd(key, fields, id=entry_id)
            for group in await reader.xinfo_groups(key):
                pipe.xgroup_create(key, group["name"], id=group["last-delivered-id"], mkstream=True)
        else:
            return False
        if expires > 0:
            pipe.pexpireat(key, expires)
        await pipe.execute()
    return True


async def copy_all(src: Redis, dst: Redis) -> int:
    """Every key of ``src`` (a client that does not decode replies) to ``dst``; how many."""
    copied = 0
    async for key in src.scan_iter(count=1000):
        copied += await copy_key(src, dst, key)
    return copied


async def _main(target: str) -> int:
    settings = load_settings()
    directory = settings.state.state_path()
    store = await asyncio.to_thread(embedded.persistent, directory, compact_seconds=3600)
    src = embedded.client(store.server, 0, decode=False)
    dst = await open_redis(target)
    try:
        copied = await copy_all(src, dst)
    finally:
        await src.aclose()
        await dst.aclose()
        embedded.shutdown(directory)
    print(f"copied {copied} keys from {directory} to {mask_url(target)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bot.state.copy", description=__doc__)
    parser.add_argument("target", help="the Redis server, e.g. redis://127.0.0.1:6379/0")
    args = parser.parse_args(argv)
    if args.target.split("://", 1)[0].endswith("+cluster"):
        print(
            "chorus: copying into a Redis Cluster is not supported: the cluster layout names "
            "some keys differently (docs/scaling.md, Redis Cluster); copy to a Redis server",
            file=sys.stderr,
        )
        return 2
    try:
        return asyncio.run(_main(args.target))
    except ConfigError as exc:
        print(f"chorus: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
