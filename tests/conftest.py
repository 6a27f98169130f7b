"""Shared fixtures: no real LLM, no leaked developer settings, and a guaranteed real Redis.

* Real vendor calls are blocked for this process and every subprocess it starts.
* Settings-shaped variables from the developer's shell (vendor keys, base URLs, ``CHORUS_*``,
  platform tokens) are removed at import and restored at exit; each test also runs in its own
  empty working directory, so nobody's ``.env`` is read. Tests that need a file of the repository
  locate it from ``__file__``, never from the working directory.
* ``redis_url`` runs a test twice, marked ``redis``: against the embedded store
  (``memory://test-<tag>``) and a real Redis server (``-k real`` / ``-k memory`` pick one). The
  real one is a private ``redis-server`` started for the session (for each pytest-xdist
  worker), or ``CHORUS_TEST_REDIS_URL`` when set, or without the binary
  ``redis://127.0.0.1:6379/15``. With none, the real half is skipped with a banner at the end.
* tests/suite_rules.py: in a strict run (``make test``: ``CHORUS_TEST_STRICT=1``; ``CI=true``)
  every skip fails; a test that starts a process must be marked ``e2e`` (``make test-fast``
  leaves those out).
* Tests sharing a real server are isolated by ``key_tag``: put it in every conversation or id
  you create; afterwards every key containing it is deleted. Nothing is flushed, so a server
  named by ``CHORUS_TEST_REDIS_URL`` may hold a developer's data in other keys.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
from hypothesis import settings as hypothesis_settings
from redis.asyncio import Redis

os.environ["CHORUS_BLOCK_REAL_LLM"] = "1"

from bot.bus.streams import RedisStreamsBus
from bot.llm import guard
from bot.state import connect, embedded, keys  # (imported after the guard's variable is set)
from tests import suite_rules
from tests.redis_cluster import STORES, start_cluster, store_url
from tests.redis_server import free_port, start_redis, stop_redis

guard.block_real_calls()

# Property tests draw the same examples on every run: CI is deterministic, and a failure found
# while exploring locally (HYPOTHESIS_PROFILE=explore) becomes an explicit @example.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The provider contract's fixtures (vendor, server, sleep, provider), for every provider test,
# and the turn stores' (turn_store: the twin, the embedded store, a real Redis).
# The suite's own rules (tests/suite_rules.py): the e2e marker and its guard, strict runs; and
# the order the tests start in, longest first across the workers (tests/suite_order.py).
pytest_plugins = ("tests.suite_rules", "tests.suite_order", "tests.provider_rig", "tests.turn_rig")

_KEEP = {
    "CHORUS_BLOCK_REAL_LLM",
    "CHORUS_TEST_REDIS_URL",
    "CHORUS_TEST_STRICT",
    "CHORUS_UPDATE_GOLDEN",
    "CHORUS_UPDATE_SCREENSHOTS",  # (read by the screenshot tests, never by Chorus)
}
_LEAKY = re.compile(
    r"^(CHORUS_|ANTHROPIC_|OPENAI_|GEMINI_|GOOGLE_API_KEY$|GOOGLE_GEMINI_|GOOGLE_GENAI_|GOOGLE_OAUTH_"
    r"|DISCORD_|SLACK_|TWITCH_|YOUTUBE_)|_BASE_URL$"
)


def _leaky_names() -> list[str]:
    return [name for name in os.environ if _LEAKY.search(name) and name not in _KEEP]


_TEST_REDIS_URL = os.environ.get("CHORUS_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
_saved_env = {name: os.environ.pop(name) for name in _leaky_names()}
_real_redis_problem: list[str] = []


def pytest_unconfigure(config: pytest.Config) -> None:
    os.environ.update(_saved_env)


@pytest.fixture(autouse=True)
def _isolated_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Each test: an empty cwd (no stray ``.env``), no settings leaked by an earlier test, and
    its own data directory, whose embedded store (the default ``embedded://``) is closed after."""
    monkeypatch.chdir(tmp_path)
    for name in _leaky_names():
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    yield
    embedded.shutdown()


# -- real Redis ---------------------------------------------------------------------------------
def _answers(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=1, retry=None)
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def _start_redis_server(binary: str, workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    """Start a throwaway server on a free port; its URL uses the tests' database 15."""
    port = free_port()
    with suite_rules.processes.paused():  # the session's server, not the first test's
        return start_redis(binary, port, workdir), f"redis://127.0.0.1:{port}/15"


@pytest.fixture(scope="session")
def real_redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of a real Redis server for this session (skipped without one; a strict run fails).

    Unless ``CHORUS_TEST_REDIS_URL`` names one, the session (each pytest-xdist worker, with
    ``-n``) starts a ``redis-server`` of its own: the e2e tests drive the loopback platforms'
    fixed channels and the Streams bus's fixed keys, which one test at a time may hold, and
    another run on the machine (a second checkout, another worker) would hold them too. Without
    the binary, the default URL is used when it answers."""
    explicit = "CHORUS_TEST_REDIS_URL" in os.environ
    binary = None if explicit else shutil.which("redis-server")
    if binary is None and _answers(_TEST_REDIS_URL):
        yield _TEST_REDIS_URL
        return
    problem = f"no Redis answered at {connect.mask_url(_TEST_REDIS_URL)} (CHORUS_TEST_REDIS_URL)"
    if binary:
        try:
            proc, url = _start_redis_server(binary, tmp_path_factory.mktemp("redis"))
        except RuntimeError as exc:
            problem = f"starting {binary} failed: {exc}"
        else:
            try:
                yield url
            finally:
                stop_redis(proc)
            return
    elif not explicit:
        problem += " and redis-server is not installed (tests/prereqs.sh installs it)"
    _real_redis_problem.append(problem)
    pytest.skip(f"real Redis unavailable: {problem}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not _real_redis_problem:
        return
    outcome = "FAILED (a strict run)" if suite_rules.STRICT else "SKIPPED"
    terminalreporter.section("REAL REDIS TESTS NOT RUN", sep="!", red=True, bold=True)
    terminalreporter.write_line(
        f"The real-Redis half of every @pytest.mark.redis test was {outcome}: "
        f"{_real_redis_problem[0]}.",
        red=True,
        bold=True,
    )
    terminalreporter.write_line(
        "Start Redis on 127.0.0.1:6379, install redis-server, or set CHORUS_TEST_REDIS_URL.",
        red=True,
    )


@pytest.fixture(scope="session")
def redis_cluster_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private Redis Cluster of three primaries for this session (``tests/redis_cluster.py``),
    ready (``cluster_state:ok`` on every node); its ``redis+cluster://`` URL."""
    cluster = start_cluster(tmp_path_factory.mktemp("redis-cluster"))
    try:
        yield cluster.url
    finally:
        cluster.stop()


@pytest.fixture
async def cluster_client(redis_cluster_url: str) -> AsyncIterator[Redis]:
    """A client of the session's Redis Cluster; keys are built in the cluster layout while it
    is open (``keys.use_cluster_layout``), the single-node layout again afterwards."""
    client = await connect.open_redis(redis_cluster_url)
    try:
        yield client
    finally:
        await client.aclose()
        keys.use_cluster_layout(False)


@pytest.fixture(
    params=[
        pytest.param("single", id="single"),
        pytest.param("cluster", id="cluster", marks=pytest.mark.e2e),
    ]
)
def production_store(request: pytest.FixtureRequest) -> tuple[str, Redis]:
    """The production store twice, for the scale-out tests: one Redis server (its URL and a
    client; keys with the test's ``key_tag`` removed after), and a Redis Cluster of three
    primaries (the keys in its cluster layout meanwhile)."""
    if request.param == "cluster":
        url: str = request.getfixturevalue("redis_cluster_url")
        return url, request.getfixturevalue("cluster_client")
    return request.getfixturevalue("real_redis_url"), request.getfixturevalue("real_redis")


@pytest.fixture
def key_tag() -> str:
    """A tag unique to this test; put it in the conversations and ids the test writes."""
    return f"t{uuid.uuid4().hex[:12]}"


@pytest.fixture(params=STORES)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """A store URL, once embedded and once a real server; real keys with ``key_tag`` are removed
    (a module whose store applies on a Redis Cluster too overrides it: ``WITH_CLUSTER``)."""
    yield from store_url(request, key_tag)


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[Redis]:
    client = await connect.open_redis(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def streams_bus(redis_client: Redis, key_tag: str) -> AsyncIterator[RedisStreamsBus]:
    """A Redis Streams bus on ``redis_client`` (consumer ``w1``, namespaced by ``key_tag``, four
    partitions, short blocks and leases so tests move fast), closed afterwards."""
    made = RedisStreamsBus(
        redis_client, consumer="w1", namespace=key_tag, partitions=4, block_ms=50, lease_ms=600
    )
    try:
        yield made
    finally:
        await made.close()


@pytest.fixture
async def real_redis(real_redis_url: str, key_tag: str) -> AsyncIterator[Redis]:
    """A client of the real Redis server; afterwards every key carrying ``key_tag`` is removed
    (for tests that need a real server: other processes, stream semantics)."""
    client = await connect.open_redis(real_redis_url)
    try:
        yield client
    finally:
        await client.aclose()
        cleanup = redis.Redis.from_url(real_redis_url)
        try:
            doomed = list(cleanup.scan_iter(match=f"*{key_tag}*", count=1000))
            if doomed:
                cleanup.delete(*doomed)
        finally:
            cleanup.close()
