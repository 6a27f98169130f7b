"""``chorus chat`` in a terminal, as a person meets it: a real process on a pseudo-terminal
(Python's ``pty``), keys typed as a terminal sends them, the screen read back, the Anthropic SDK
against a loopback model that writes 40 chunks 100 ms apart.

It shows the welcome line (name, model, /help, Ctrl-D), the answer while it is written (the first
words on screen before the model is done), the final answer rendered as Markdown, line editing
with the arrow keys (Left to fix a typo, Up for the line before, from the history file), and no
log line between the turns (they went to the log file). Ctrl-D quits with status 0.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import pty
import re
import struct
import sys
import termios
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

from tests.loopback.anthropic_server import AnthropicServer
from tests.test_chat_e2e import ROOT, base_env
from tests.test_stream_discord_e2e import WORDS

ANSWER = "**Streaming** works: " + " ".join(f"w{i}" for i in range(WORDS - 3))
_ANSI = re.compile(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[=>78]")
LEFT, UP, END, ENTER, CTRL_D = "\x1b[D", "\x1b[A", "\x1b[F", "\r", "\x04"


@dataclass
class Screen:
    """What the terminal received, and a way to type into it."""

    fd: int
    raw: bytearray = field(default_factory=bytearray)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def text(self) -> str:
        return _ANSI.sub("", self.raw.decode("utf-8", "replace")).replace("\r", "")

    def feed(self) -> None:
        try:
            chunk = os.read(self.fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            asyncio.get_running_loop().remove_reader(self.fd)
        self.raw += chunk
        self.changed.set()

    async def wait_for(self, predicate: Callable[[str], bool], limit: float = 60.0) -> str:
        try:
            async with asyncio.timeout(limit):
                while not predicate(self.text):
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise AssertionError(f"not on the screen in {limit} s:\n{self.text[-3000:]}") from None
        return self.text

    async def type(self, keys: str) -> None:
        for key in keys if len(keys) == 1 or keys.startswith("\x1b") else [keys]:
            os.write(self.fd, key.encode())
        await asyncio.sleep(0.05)  # (a person types; the editor reads key by key)


@asynccontextmanager
async def terminal(args: list[str], env: dict[str, str]) -> AsyncIterator[tuple[int, Screen]]:
    pid, fd = pty.fork()
    if pid == 0:  # the child: chorus on the terminal
        os.execve(sys.executable, [sys.executable, "-m", "bot.cli", *args], env)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 160, 0, 0))
    screen = Screen(fd)
    asyncio.get_running_loop().add_reader(fd, screen.feed)
    try:
        yield pid, screen
    finally:
        asyncio.get_running_loop().remove_reader(fd)
        with suppress(ProcessLookupError):
            os.kill(pid, 9)
        os.close(fd)


async def exit_status(pid: int, limit: float = 30.0) -> int:
    async with asyncio.timeout(limit):
        while True:
            done, status = await asyncio.to_thread(os.waitpid, pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            await asyncio.sleep(0.1)


async def test_a_terminal_chat_streams_edits_and_keeps_logs_off_the_screen(
    tmp_path: Path,
) -> None:
    state = tmp_path / "state"
    async with AnthropicServer() as model:
        model.replies.extend([{"text": ANSWER, "chunk_delay": 0.1}, "Again, *gladly*."])
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_LOG_LEVEL": "INFO",
            "XDG_STATE_HOME": str(state),
            "TERM": "xterm-256color",
            "PROMPT_TOOLKIT_NO_CPR": "1",  # (this terminal does not report the cursor)
            "PYTHONPATH": str(ROOT),
        }
        async with terminal(["chat", "--user", "ada"], env) as (pid, screen):
            welcome = await screen.wait_for(lambda t: "ada> " in t, limit=90)
            assert "Chorus · anthropic:claude-test · /help" in welcome and "Ctrl-D" in welcome
            await screen.type("wrld")
            for key in (LEFT, LEFT, LEFT):
                await screen.type(key)
            await screen.type("o")
            await screen.type(END)
            await screen.type(" tell me")
            await screen.type(ENTER)
            await screen.wait_for(lambda t: "w0 w1" in t)
            chunks_then = len(model.chunk_times)
            last = f"w{WORDS - 4}"
            after = await screen.wait_for(lambda t: last in t and "ada> " in t.split(last)[-1])
            await asyncio.sleep(0.3)  # (a person reads the answer before typing on)
            await screen.type(UP)  # the line before, from the history
            await screen.type(ENTER)
            done = "Again, gladly."
            await screen.wait_for(lambda t: done in t and "ada> " in t.split(done)[-1])
            await asyncio.sleep(0.3)
            await screen.type(CTRL_D)
            status = await exit_status(pid)
            screen.feed()
        shown = screen.text
    assert status == 0, shown[-2000:]
    assert chunks_then < WORDS, "the answer showed only once the model had finished"
    asked = [json.dumps(body["messages"][-1]) for body in model.bodies]
    assert "world tell me" in asked[0], asked  # Left x3, "o", End: edited in place
    assert "world tell me" in asked[1], asked  # Up: the same line again
    assert "Streaming works:" in after and "**" not in after  # rendered as Markdown
    assert b"\x1b[" in bytes(screen.raw)  # colour and cursor control: a real terminal UI
    assert "turn finished" not in shown and "INFO" not in shown, shown
    logged = (state / "chorus" / "chorus.log").read_text()
    assert "turn finished" in logged
    history = (state / "chorus" / "history").read_text()
    assert "world tell me" in history
