"""End to end: ``chorus chat`` as a real process, through each vendor's real SDK, against a
loopback server that speaks that vendor's wire format."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.base import LoopbackServer
from tests.loopback.gemini_server import GeminiServer
from tests.loopback.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parent.parent

ChatServer = type[AnthropicServer] | type[OpenAIServer] | type[GeminiServer]
VENDORS: dict[str, tuple[ChatServer, str, str, str]] = {
    "anthropic": (
        AnthropicServer,
        "anthropic:claude-test",
        "ANTHROPIC_API_KEY",
        "ANTHROPIC_BASE_URL",
    ),
    "openai": (OpenAIServer, "openai:gpt-test", "OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "gemini": (GeminiServer, "gemini:gemini-test", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"),
}


def base_env(tmp_path: Path) -> dict[str, str]:
    """A clean environment: nothing from the developer's shell reaches the child."""
    env = {k: v for k, v in os.environ.items() if k in {"PATH", "HOME", "LANG", "SYSTEMROOT"}}
    env.update(
        CHORUS_BLOCK_REAL_LLM="1",
        CHORUS_REDIS_URL="memory://",
        CHORUS_LLM_MAX_RETRIES="1",
        CHORUS_HEALTH_PORT="0",
        PYTHONPATH=str(ROOT),
        HOME=str(tmp_path),
    )
    return env


async def spawn_chorus(
    args: list[str], env: dict[str, str], cwd: Path, *, stdin: int = asyncio.subprocess.DEVNULL
) -> asyncio.subprocess.Process:
    """``chorus <args>`` as a real process (``python -m bot.cli``), stdout and stderr piped."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot.cli",
        *args,
        stdin=stdin,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
    )


async def stopped(proc: asyncio.subprocess.Process, limit: float = 60) -> tuple[bytes, bytes]:
    """Stdout and stderr of ``proc`` once it has ended, within ``limit`` seconds of being told
    to stop. A process that does not end is killed and the test fails with its last log lines,
    which say which step of the shutdown it was stuck in."""
    reading = asyncio.ensure_future(proc.communicate())
    done, _ = await asyncio.wait({reading}, timeout=limit)
    if done:
        return reading.result()
    proc.kill()
    _, err = await reading
    tail = err.decode(errors="replace")[-4000:]
    raise AssertionError(f"chorus had not ended {limit:.0f} s after it was told to stop:\n{tail}")


async def run_chorus(
    args: list[str], env: dict[str, str], cwd: Path, stdin: bytes = b""
) -> tuple[int, str, str]:
    proc = await spawn_chorus(args, env, cwd, stdin=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture(params=sorted(VENDORS))
async def vendor(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[LoopbackServer, dict[str, str]]]:
    server_cls, model, key_env, url_env = VENDORS[request.param]
    server: Any = server_cls()
    await server.start()
    env = base_env(tmp_path)
    env.update({"CHORUS_MODEL": model, key_env: "test-key-0123456789", url_env: server.base_url})
    try:
        yield server, env
    finally:
        await server.close()


async def test_two_turn_conversation_carries_the_first_exchange(
    vendor: tuple[Any, dict[str, str]], tmp_path: Path
) -> None:
    server, env = vendor
    server.replies.extend(["Nice to meet you, Ada.", "Your name is Ada."])
    code, out, err = await run_chorus(
        ["chat"], env, tmp_path, b"My name is Ada.\nWhat is my name?\n"
    )
    assert code == 0, err
    assert out.splitlines() == ["Nice to meet you, Ada.", "Your name is Ada."]
    assert len(server.requests) == 2
    first, second = (json.dumps(body) for body in server.bodies)
    assert "My name is Ada." in first and "What is my name?" not in first
    # The second request carries the first exchange, in order, then the new question.
    for needle in ("My name is Ada.", "Nice to meet you, Ada.", "What is my name?"):
        assert needle in second
    assert (
        second.index("My name is Ada.")
        < second.index("Nice to meet you, Ada.")
        < second.index("What is my name?")
    )
    assert "test-key-0123456789" not in err


async def test_a_multi_line_answer_stays_on_its_one_output_line(
    vendor: tuple[Any, dict[str, str]], tmp_path: Path
) -> None:
    """One answer per line holds for answers with line breaks: they are escaped the way
    ``printf '%b'`` reads them back."""
    server, env = vendor
    answer = "Two steps:\n1. run `make`\n2. see C:\\chorus\\out\n\nDone."
    server.replies.extend([answer, "second"])
    code, out, err = await run_chorus(["chat"], env, tmp_path, b"how?\nand then?\n")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 2 and lines[1] == "second"
    printf = await asyncio.create_subprocess_exec(
        "bash", "-c", 'printf "%b" "$1"', "decode", lines[0], stdout=asyncio.subprocess.PIPE
    )
    decoded, _ = await printf.communicate()
    assert decoded.decode() == answer


async def test_bad_lines_get_notices_and_never_stop_the_loop(
    vendor: tuple[Any, dict[str, str]], tmp_path: Path
) -> None:
    server, env = vendor
    server.replies.append("hello back")
    big = b"x" * 100_000
    stdin = b"\n" + big + b"\n" + b"caf\xe9 \xff\n" + b"hello\n"
    code, out, err = await run_chorus(["chat"], env, tmp_path, stdin)
    assert code == 0, err
    lines = out.splitlines()
    assert lines == [
        "[chorus] line 1 is empty; nothing to answer",
        "That message is 100,000 characters long; I can read at most 8,000. Please shorten it.",
        "[chorus] line 3 is not valid UTF-8 (byte 0xe9 at position 3); skipped",
        "hello back",
    ]
    assert len(server.requests) == 1  # only the good line reached the model


async def test_provider_rejects_the_key_user_gets_an_apology_and_the_log_names_the_key(
    vendor: tuple[Any, dict[str, str]], tmp_path: Path
) -> None:
    server, env = vendor
    server.fail(401, "invalid x-api-key")
    server.replies.append("second try works")
    code, out, err = await run_chorus(["chat"], env, tmp_path, b"first\nsecond\n")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("Sorry, I couldn't reach the language model")
    assert lines[1] == "second try works"
    key_env = next(v[2] for v in VENDORS.values() if v[2] in env)
    assert f"Check {key_env}" in err
    assert "test-key-0123456789" not in err


async def test_json_output_mode(vendor: tuple[Any, dict[str, str]], tmp_path: Path) -> None:
    server, env = vendor
    server.replies.append("line one\nline two")
    code, out, err = await run_chorus(["chat", "--json"], env, tmp_path, b"hi\n")
    assert code == 0, err
    record = json.loads(out)
    assert record == {"line": 1, "text": "line one\nline two", "notice": False, "error": False}


async def test_a_process_that_will_not_stop_fails_with_its_last_log_lines() -> None:
    """The e2e tests' ``stopped``: a hung shutdown is a failure that shows where it hung."""
    code = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('stuck closing the gateway', file=sys.stderr, flush=True); print('ready', flush=True); "
        "time.sleep(60)"
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    assert proc.stdout is not None
    await proc.stdout.readline()  # the handler is in place
    proc.terminate()
    with pytest.raises(AssertionError, match=r"(?s)had not ended 1 s.*stuck closing the gateway"):
        await stopped(proc, limit=1)
    assert proc.returncode == -9
