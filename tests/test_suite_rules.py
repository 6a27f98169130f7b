"""The suite's own rules (tests/suite_rules.py), run on small test files in a pytest of their own.

A test that starts a process without the ``e2e`` marker fails, naming the command; a marked one,
or one in a ``*_e2e.py`` file, passes, and ``-m "not e2e"`` (``make test-fast``) leaves it out;
in a strict run (``CHORUS_TEST_STRICT=1``, as ``make test`` sets) a skip fails the run.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests import suite_rules

pytest_plugins = ("pytester",)
pytestmark = pytest.mark.e2e  # each case runs pytest as a process

ROOT = Path(__file__).resolve().parent.parent

SPAWNS = """
import asyncio, subprocess, sys
import pytest

def test_unmarked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

async def _spawn():
    proc = await asyncio.create_subprocess_exec(sys.executable, "-c", "print(1)")
    await proc.wait()

def test_unmarked_asyncio_subprocess():
    asyncio.run(_spawn())

@pytest.mark.e2e
def test_marked_subprocess():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

def test_no_process():
    assert sum([1, 2]) == 3
"""

SKIPS = """
import pytest

def test_skipped_for_a_missing_tool():
    pytest.skip("frobnicate is not installed")

@pytest.mark.xfail(reason="known")
def test_expected_failure():
    assert False
"""


@pytest.fixture
def suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("CHORUS_TEST_STRICT", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # when this runs on a worker
    pytester.makeini("[pytest]\nmarkers =\n    e2e: starts processes\n")
    return pytester


def run(suite: pytest.Pytester, *args: str) -> pytest.RunResult:
    return suite.runpytest_subprocess("-p", "tests.suite_rules", "-p", "no:cacheprovider", *args)


def test_an_unmarked_test_that_starts_a_process_fails_naming_it(suite: pytest.Pytester) -> None:
    suite.makepyfile(test_spawns=SPAWNS)
    result = run(suite)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*_ test_unmarked_subprocess _*",
            "this test started a process (*python -c pass) but is not marked 'e2e': add "
            "@pytest.mark.e2e *",
            "*_ test_unmarked_asyncio_subprocess _*",
            "this test started a process (*python -c print(1)) but is not marked 'e2e'*",
        ]
    )


def test_e2e_files_are_marked_by_name_and_left_out_of_the_fast_run(
    suite: pytest.Pytester,
) -> None:
    suite.makepyfile(test_things_e2e=SPAWNS.replace("@pytest.mark.e2e\n", ""))
    suite.makepyfile(test_plain="def test_no_process():\n    assert True is not False\n")
    run(suite).assert_outcomes(passed=5)  # in an *_e2e.py file a process is fine
    fast = run(suite, "-m", "not e2e")
    fast.assert_outcomes(passed=1, deselected=4)


def test_a_skip_passes_an_ordinary_run_and_fails_a_strict_one(
    suite: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    suite.makepyfile(test_skips=SKIPS)
    run(suite).assert_outcomes(skipped=1, xfailed=1)
    monkeypatch.setenv("CHORUS_TEST_STRICT", "1")
    strict = run(suite)
    strict.assert_outcomes(failed=1, xfailed=1)
    strict.stdout.fnmatch_lines(
        ["skipped in a strict run (*): Skipped: frobnicate is not installed"]
    )


def test_a_process_started_inside_paused_is_not_held_against_the_test() -> None:
    recorder = suite_rules.ProcessRecorder()
    recorder.recording = True
    recorder.hook("subprocess.Popen", (sys.executable, [sys.executable, "-c", "pass"], None, None))
    with recorder.paused():
        recorder.hook("subprocess.Popen", ("redis-server", ["redis-server"], None, None))
    recorder.hook("os.fork", ())
    exe = suite_rules.describe("os.system", (sys.executable,))  # shortened the same way
    assert recorder.started == [f"{exe} -c pass", "os.fork"]
    assert suite_rules.unmarked_spawn(True, recorder.started) is None
