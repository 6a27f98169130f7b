"""The start-up benchmark (bench/startup.py) once per kind of run: it times a real piped
``chorus chat`` to its first answer and reads memory from /proc of the real process. No timing
is asserted (the figures go in BENCHMARKS.md); what is checked is that it measures something
real: an answer arrived, and the memory read is the child's, not this process's."""

from __future__ import annotations

import os
import sys

import pytest

from bench.instructions import GateError
from bench.startup import (
    cpu_seconds,
    first_answer,
    idle_run,
    import_cpu,
    import_instructions,
    status_kib,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_status_reads_a_processs_resident_and_peak_memory_and_cpu() -> None:
    mine = status_kib(os.getpid())
    assert 0 < mine["VmRSS"] <= mine["VmHWM"]
    before = cpu_seconds(os.getpid())
    total = 0
    for i in range(3_000_000):  # about a tenth of a second of CPU
        total += i
    assert cpu_seconds(os.getpid()) > before


@pytest.mark.e2e
async def test_a_piped_chat_is_timed_to_its_first_answer() -> None:
    seconds, peak_mib, cpu = await first_answer("openai")
    assert seconds > 0 and cpu > 0
    assert peak_mib > 20  # the chat process with the SDK loaded, not an empty interpreter


@pytest.mark.e2e
async def test_an_idle_run_is_read_once_ready() -> None:
    rss_mib, peak_mib = await idle_run()
    assert 20 < rss_mib <= peak_mib


@pytest.mark.e2e
def test_the_sdk_floor_is_the_cpu_of_a_fresh_interpreter_importing_it() -> None:
    floor = import_cpu("json")  # cheap, and no SDK: only that a real child was measured
    assert floor > 0
    with pytest.raises(RuntimeError, match="failed in a fresh interpreter"):
        import_cpu("no_such_module_anywhere")


@pytest.mark.e2e
def test_the_sdk_floor_in_instructions_is_counted_by_valgrind_in_a_fresh_interpreter() -> None:
    """The chat's own count runs in ``make test``'s gate (``bench.instructions``); here the
    floor's: importing a module counts more than importing nothing, and a failure is named."""
    bare, more = import_instructions("sys"), import_instructions("email.mime.multipart")
    assert 0 < bare < more
    with pytest.raises(GateError, match="importing no_such_module_anywhere failed"):
        import_instructions("no_such_module_anywhere")
