"""Redis is the state layer's business: only ``bot.state``, ``bot.bus`` and ``bot.ops`` speak it.

Everything else holds stores (``bot.state``'s classes) or, at most, the connection typed as
``bot.state.connect.Client`` to hand to them: it imports nothing from redis-py and sends no
command itself. This reads the product's source and finds, outside those three packages:

- an import of ``redis`` (the module, or anything under it);
- a call of a Redis command on a connection or a pipeline (``self.redis.get(...)``,
  ``pipe.zadd(...)``: a receiver named like one, a method named like a command).

``NOT_YET`` lists the modules whose storage has not moved into ``bot.state`` yet, each with the
state module that will take it; it only shrinks (a listed module that no longer needs the
exception fails the second test).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("bot", "adapters", "insights", "prompts")
STATE_LAYER = ("bot/state/", "bot/bus/", "bot/ops/")

# Commands Chorus sends (redis-py's method names); a call of one on a connection or pipeline.
COMMANDS = frozenset(
    [
        "get",
        "set",
        "delete",
        "expire",
        "pexpire",
        "persist",
        "ttl",
        "pttl",
        "exists",
        "getdel",
        "mget",
        "incr",
        "incrby",
        "incrbyfloat",
        "hset",
        "hget",
        "hgetall",
        "hmget",
        "hdel",
        "hincrby",
        "hkeys",
        "hlen",
        "sadd",
        "srem",
        "smembers",
        "sismember",
        "zadd",
        "zrem",
        "zrange",
        "zrevrange",
        "zrangebyscore",
        "zrevrangebyscore",
        "zrangebylex",
        "zremrangebyscore",
        "zremrangebyrank",
        "zcard",
        "zscore",
        "lpush",
        "rpush",
        "lrange",
        "ltrim",
        "lrem",
        "llen",
        "xadd",
        "xrange",
        "xrevrange",
        "xlen",
        "xread",
        "xtrim",
        "eval",
        "evalsha",
        "watch",
        "multi",
        "unwatch",
        "pipeline",
        "execute",
        "scan_iter",
        "memory_usage",
    ]
)
RECEIVERS = ("redis", "pipe", "client")

NOT_YET: dict[str, str] = {}

# The modules that import the client library itself: its names for the rest of the layer
# (bot/state/client.py) and connecting (connect.py: the URL, the retries).
DRIVER = frozenset({"bot/state/client.py", "bot/state/connect.py"})


def _modules() -> dict[str, ast.Module]:
    found = {}
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = str(path.relative_to(ROOT))
            if not rel.startswith(STATE_LAYER) and "_proto" not in path.parts:
                found[rel] = ast.parse(path.read_text(), rel)
    return found


def _receiver(node: ast.expr) -> str:
    """The last name of a call's receiver (``self.redis`` -> ``redis``)."""
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Name):
        return node.id
    return ""


def speaks_redis(tree: ast.Module) -> list[str]:
    """What in ``tree`` speaks Redis: its imports of redis-py and its command calls."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [f"line {node.lineno}: import {a.name}" for a in node.names if _redis(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.module and _redis(node.module):
            found.append(f"line {node.lineno}: from {node.module} import ...")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in COMMANDS
            and _receiver(node.func.value).lstrip("_").endswith(RECEIVERS)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node.func)}(...)")
    return sorted(found, key=lambda use: int(use.split(":")[0].removeprefix("line ")))


def _redis(module: str) -> bool:
    return module == "redis" or module.startswith("redis.")


def test_only_the_state_layer_speaks_redis() -> None:
    speaking = {path: uses for path, tree in _modules().items() if (uses := speaks_redis(tree))}
    unlisted = {path: uses[:3] for path, uses in speaking.items() if path not in NOT_YET}
    assert not unlisted, f"Redis outside bot/state, bot/bus, bot/ops: {unlisted}"


def test_the_client_library_is_imported_by_a_few_modules_only() -> None:
    """The layer speaks Redis commands, but names redis-py in ``DRIVER`` alone; a new module
    takes ``bot.state.client``'s names."""
    importing = set()
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            uses = [u for u in speaks_redis(tree) if "import" in u]
            if uses:
                importing.add(str(path.relative_to(ROOT)))
    assert importing <= DRIVER, f"import redis-py through bot.state.client: {importing - DRIVER}"
    assert len(importing) <= 12


def test_every_module_not_yet_moved_still_speaks_redis() -> None:
    modules = _modules()
    moved = [path for path in NOT_YET if path not in modules or not speaks_redis(modules[path])]
    assert not moved, f"{moved} no longer speak Redis: take them off NOT_YET"


def test_the_finder_sees_imports_and_commands() -> None:
    source = (
        "from redis.asyncio import Redis\n"
        "import redis\n"
        "async def f(self, pipe, store):\n"
        "    await self.redis.get('k')\n"
        "    pipe.zadd('k', {})\n"
        "    await store.load('k')\n"
        "    self._redis.hset('k', 'f', 1)\n"
    )
    found = speaks_redis(ast.parse(source))
    assert [f.split(":")[0] for f in found] == ["line 1", "line 2", "line 4", "line 5", "line 7"]
