"""No private name (a leading ``_``) of another package in Chorus's code, except as listed here.

A library's private names change without notice, so every one Chorus touches makes an upgrade a
risk. This reads the product's source (``bot``, ``adapters``, ``insights``, ``prompts``) and
finds, without importing it:

- an import of a third-party module or name that starts with ``_`` (``from fakeredis._core
  import ...``, ``from google.genai import _api_client``);
- an attribute starting with ``_`` read from a third-party module (``httpx._config``);
- an attribute starting with ``_`` of any other object that Chorus's own code never defines
  (``client._api_client``, ``getattr(pool, "_idle")``): a name no Chorus class, function or
  assignment declares can only be someone else's.

Dunder names (``__name__``) are public protocol. Each exception below says which names, why
they are needed, and the versions they were checked on; a new one is a decision, written here.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("bot", "adapters", "insights", "prompts")
OURS = set(PRODUCT)


@dataclass(frozen=True)
class Allowed:
    path: str  # the module, relative to the repository root
    names: frozenset[str]  # the private names it may use
    why: str
    checked_on: str  # the versions (constraints.txt) the use was checked against


_TWITCH_HANDOVER = (
    "twitchio 3 does not follow an EventSub session_reconnect as Twitch documents it (connect to "
    "the new URL, keep reading the old socket until the welcome, move the subscriptions, no "
    "re-subscribe): HandoverWebsocket does, by subclassing twitchio's Websocket (its private "
    "_process_reconnect, _process_notification, _create_connection_task and _cleanup, and the "
    "_http, _subscriptions, _websockets and _closed it keeps besides those listed). "
    "tests/test_twitch_reconnect_e2e.py runs it against a loopback EventSub server; conduits "
    "(a later issue) replace the socket-per-bot model this patches."
)
ALLOWED: tuple[Allowed, ...] = (
    Allowed(
        "adapters/discord/adapter.py",
        frozenset({"_connection"}),
        "discord.py parses every gateway event inside its ConnectionState, where a payload it "
        "cannot parse raises out of the gateway's read loop and drops the connection; the "
        "ParserGuard wraps ConnectionState.parsers (client._connection.parsers) so a malformed "
        "event is logged and skipped (tests/test_payload_fuzz_ws.py). discord.py has no public "
        "hook for it.",
        "discord.py 2.7.1",
    ),
    Allowed(
        "adapters/twitch/adapter.py",
        frozenset({"_ready"}),
        "Readiness reads twitchio's own state of an EventSub socket without a request: whether "
        "its session_welcome arrived (Websocket._ready, cleared while it reconnects); twitchio "
        "exposes connected and subscription_count, not the welcome "
        "(tests/test_adapter_readiness.py).",
        "twitchio 3.3.2",
    ),
    Allowed(
        "adapters/twitch/eventsub.py",
        frozenset(
            {
                "_client",
                "_connection_tasks",
                "_keep_alive_timeout",
                "_listen_task",
                "_original_attempts",
                "_token_for",
            }
        ),
        _TWITCH_HANDOVER,
        "twitchio 3.3.2",
    ),
    Allowed(
        "adapters/twitch/eventsub.py",
        frozenset({"_shard_id"}),
        "A conduit shard's socket (TWITCH_TRANSPORT=conduit) keeps its shard across a handover "
        "(the new socket is made with the old one's shard_id: Twitch moves the shard with the "
        "session) and is reopened by ConduitShards when twitchio drops it, which it tells by "
        "its shard id; twitchio takes shard_id in the Websocket's constructor and exposes no "
        "reader for it (tests/test_twitch_conduit.py, tests/test_twitch_conduit_e2e.py).",
        "twitchio 3.3.2",
    ),
)


@dataclass(frozen=True)
class Use:
    path: str
    line: int
    name: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what} {self.name}"


def _files() -> Iterator[Path]:
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_proto" not in path.parts:  # protoc's output, committed untouched
                yield path


def _third_party(module: str) -> bool:
    top = module.split(".")[0]
    return bool(top) and top not in OURS and top not in sys.stdlib_module_names


# Named tuples' documented methods (``urlsplit(...)._replace``): public despite the underscore.
NAMEDTUPLE_API = frozenset({"_replace", "_asdict", "_fields", "_make", "_field_defaults"})


def _private(name: str) -> bool:
    dunder = name.startswith("__") and name.endswith("__")
    return name.startswith("_") and not dunder and name not in NAMEDTUPLE_API


def _defined_by_us(trees: dict[Path, ast.Module]) -> set[str]:
    """Every name Chorus's own code declares: functions, classes, assignments (to names and
    attributes), parameters, import aliases, ``__slots__`` entries."""
    names: set[str] = set()
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store | ast.Del):
                names.add(node.attr)
            elif isinstance(node, ast.alias) and node.asname:
                names.add(node.asname)
            elif isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__slots__" for t in node.targets
            ):
                names.update(
                    c.value
                    for c in ast.walk(node.value)
                    if isinstance(c, ast.Constant) and isinstance(c.value, str)
                )
    return names


def _module_aliases(tree: ast.Module) -> dict[str, str]:
    """Local names bound to modules by ``import x`` / ``import x.y as z``, and what they are."""
    bound: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                local = alias.asname or alias.name.split(".")[0]
                bound[local] = alias.name if alias.asname else alias.name.split(".")[0]
    return bound


def _uses(path: Path, tree: ast.Module, ours: set[str]) -> Iterator[Use]:
    rel = str(path.relative_to(ROOT))
    modules = _module_aliases(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if _third_party(alias.name) and any(_private(p) for p in parts):
                    yield Use(rel, node.lineno, alias.name, "imports")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if not _third_party(node.module):
                continue
            if any(_private(p) for p in node.module.split(".")):
                yield Use(rel, node.lineno, node.module, "imports from")
            for alias in node.names:
                if _private(alias.name):
                    yield Use(rel, node.lineno, f"{node.module}.{alias.name}", "imports")
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            if isinstance(base, ast.Name) and base.id in modules:
                if _third_party(modules[base.id]):  # (the standard library's are not counted)
                    yield Use(rel, node.lineno, f"{modules[base.id]}.{node.attr}", "reads")
            elif node.attr not in ours:
                yield Use(rel, node.lineno, node.attr, "reads the attribute")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
            and _private(node.args[1].value)
            and node.args[1].value not in ours
        ):
            yield Use(rel, node.lineno, node.args[1].value, f"{node.func.id}s")


@functools.cache
def found_uses() -> list[Use]:
    trees = {path: ast.parse(path.read_text(), str(path)) for path in _files()}
    ours = _defined_by_us(trees)
    return [use for path, tree in trees.items() for use in _uses(path, tree, ours)]


def _allowed(use: Use) -> bool:
    return any(
        use.path == a.path
        and use.name.split(".")[-1] in a.names
        or use.path == a.path
        and use.name in a.names
        for a in ALLOWED
    )


def test_no_private_name_of_another_package_is_used() -> None:
    unlisted = [str(use) for use in found_uses() if not _allowed(use)]
    assert not unlisted, (
        "private names of other packages (list each with its reason):\n" + "\n".join(unlisted)
    )


def test_every_exception_is_still_needed() -> None:
    """A listed name the code no longer uses is taken off the list."""
    used = found_uses()
    for allowed in ALLOWED:
        for name in allowed.names:
            assert any(
                u.path == allowed.path and name in (u.name, u.name.split(".")[-1]) for u in used
            ), f"{allowed.path} no longer uses {name}: remove it from ALLOWED"


def test_the_walk_finds_each_kind_of_use(tmp_path: Path) -> None:
    source = (
        "import httpx._config\n"
        "from fakeredis._core import Database\n"
        "from google.genai import _api_client\n"
        "import aiohttp\n"
        "def f(client, pool):\n"
        "    aiohttp._helpers\n"
        "    client._api_client\n"
        "    getattr(pool, '_idle')\n"
        "    self_defined = pool._mine\n"
        "class Ours:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "        self.__dict__\n"
    )
    path = ROOT / "bot" / "example_module.py"  # a path inside the product, never written
    tree = ast.parse(source)
    ours = _defined_by_us({path: tree})
    found = sorted((u.line, u.name) for u in _uses(path, tree, ours))
    assert found == [
        (1, "httpx._config"),
        (2, "fakeredis._core"),
        (3, "google.genai._api_client"),
        (6, "aiohttp._helpers"),
        (7, "_api_client"),
        (8, "_idle"),
    ]
