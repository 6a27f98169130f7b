"""The suite's own rules, a pytest plugin (the conftest loads it): the ``e2e`` marker and its
guard, and strict runs.

``make test-fast`` runs ``-m "not e2e"``: the unit and contract tests, for the inner loop. A
test that starts a process (``chorus run``, a private ``redis-server``, a linter binary) is an
end-to-end test and must carry the ``e2e`` marker, or the fast run would quietly grow slow and
start processes. Files named ``*_e2e.py`` are marked here; any other test that starts one says
so with ``pytest.mark.e2e``. The guard is an audit hook (PEP 578): every process start in this
interpreter raises an audit event, whatever module made it (subprocess, asyncio, os.fork), so
an unmarked test that starts one fails, naming the command it ran.

A strict run (``CHORUS_TEST_STRICT=1``, which ``make test`` sets, or ``CI=true``) turns every
skip into a failure: a missing tool (Redis, Chromium, valgrind, ...) can never let the run pass
by skipping the tests that need it.

(PYTEST_DONT_REWRITE: the conftest imports this module before pytest loads it as a plugin.)
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Generator, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

MARKER = "e2e"
STRICT = os.environ.get("CHORUS_TEST_STRICT") == "1" or os.environ.get("CI", "").lower() == "true"
# Audit events of the interpreter that start another process (CPython's audit events table).
_SPAWN_EVENTS = frozenset(
    {"subprocess.Popen", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system"}
)


class ProcessRecorder:
    """Collects the commands the running test starts while ``recording`` is on."""

    def __init__(self) -> None:
        self.recording = False
        self.started: list[str] = []

    def hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.recording and event in _SPAWN_EVENTS:
            self.started.append(describe(event, args))

    def install(self) -> None:
        sys.addaudithook(self.hook)

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Not recorded: a session's shared server started while some test happens to run."""
        was, self.recording = self.recording, False
        try:
            yield
        finally:
            self.recording = was


def describe(event: str, args: tuple[Any, ...]) -> str:
    """A short, readable name of what was started (the argv when the event carries one)."""
    if event in {"subprocess.Popen", "os.posix_spawn", "os.spawn"} and len(args) >= 2:
        argv = args[1]
        if isinstance(argv, str | bytes):
            return _short(argv if isinstance(argv, str) else argv.decode(errors="replace"))
        if isinstance(argv, Sequence):
            return " ".join(_short(str(part)) for part in list(argv)[:4])
    if event == "os.system" and args:
        return _short(str(args[0]))
    return event


def _short(text: str, limit: int = 40) -> str:
    """``text`` in at most ``limit`` characters, keeping its end: a program's path ends with
    its name, whatever directory the checkout lives in."""
    return text if len(text) <= limit else "…" + text[-(limit - 1) :]


def is_e2e_file(path: Path) -> bool:
    return path.name.endswith("_e2e.py")


def unmarked_spawn(has_marker: bool, started: Sequence[str]) -> str | None:
    """The failure message for a test that started processes without the marker, or None."""
    if has_marker or not started:
        return None
    shown = "; ".join(dict.fromkeys(started))
    return (
        f"this test started a process ({shown}) but is not marked {MARKER!r}: add "
        f"@pytest.mark.{MARKER} (or pytestmark = pytest.mark.{MARKER} for the module), so "
        "`make test-fast` (-m 'not e2e') leaves it out"
    )


# The stdlib's platform.processor() runs `uname -p` once per process and caches it; the vendor
# SDKs ask for it in their first request's headers. Asked here, it is nobody's test's process.
platform.processor()
processes = ProcessRecorder()
processes.install()


# -- the plugin's hooks ---------------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if is_e2e_file(item.path):
            item.add_marker(MARKER)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    processes.started.clear()
    processes.recording = True


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """An unmarked test that started a process fails (checked after its call, and after its
    teardown for what the teardown started); in a strict run a skip fails."""
    report = yield
    if call.when != "setup":
        processes.recording = call.when == "call"  # on through the teardown, then off
        problem = unmarked_spawn(item.get_closest_marker(MARKER) is not None, processes.started)
        processes.started.clear()
        if problem and not report.failed:
            report.outcome = "failed"
            report.longrepr = problem
    if STRICT and report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = f"skipped in a strict run (CHORUS_TEST_STRICT=1 / CI=true): {reason}"
    return report
