"""The console adapter: chat with Chorus in a terminal, or script it through a pipe.

On a TTY it is an interactive prompt. When stdin is not a TTY it reads one message per line and
writes exactly one answer per line to stdout, in order, then exits after the last answer, so
``printf 'hi\\nwhat did I say?\\n' | chorus chat`` is a scriptable conversation. An answer
with line breaks stays on its one line: a line break is written ``\\n``, a carriage return
``\\r`` and a backslash ``\\\\`` (what ``printf '%b'`` turns back into the text); ``--json``
gives the exact text instead. Logs go to stderr. A line that cannot be a message (empty, not UTF-8, over the read cap) gets a one-line
``[chorus] ...`` notice in its place, so input and output lines still pair up (the notices'
wording is ``prompts/console/*``). A message the bot sends on its own (a plugin's ``ctx.send``,
or its ``ctx.reply`` beside the answer) has no line of input to pair with: it is written on a
line of its own as it arrives.

On a terminal (stdin and stdout both TTYs) the screen belongs to ``adapters/console_tty.py``:
a welcome line, line editing and history, answers streamed (``ReplyDraft``s) and rendered as
Markdown, progress while tools run. Pipes never see drafts: the answer comes whole.

The console is a direct conversation per console user (``--user``), like a DM.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
import uuid
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO, TypeVar

import prompts
from bot.bus.base import EventBus
from bot.bus.topics import INBOUND, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, Outbound, Reply, ReplyDraft, Role

if TYPE_CHECKING:
    from adapters.console_tty import Terminal

log = logging.getLogger("chorus.console")

PLATFORM = "console"
READ_CAP_BYTES = 1024 * 1024
T = TypeVar("T")


class LineSource(Protocol):
    def readline(self, limit: int = -1, /) -> bytes: ...


def read_line(stream: LineSource, cap: int = READ_CAP_BYTES) -> tuple[bytes, bool] | None:
    """One line without its ending, and whether it was cut at ``cap``; None at end of input.

    The rest of an over-long line is read and thrown away so it cannot exhaust memory.
    """
    line = stream.readline(cap + 1)
    if not line:
        return None
    if line.endswith(b"\n"):
        return line.rstrip(b"\r\n"), False
    if len(line) <= cap:
        return line.rstrip(b"\r"), False  # last line without a newline
    while True:
        rest = stream.readline(64 * 1024)
        if not rest or rest.endswith(b"\n"):
            break
    return line[:cap], True


class FdLineReader:
    """``readline(limit)`` straight from a file descriptor with ``os.read``.

    ``sys.stdin.buffer`` takes a lock while a read blocks; a daemon thread parked in it when the
    user presses Ctrl-C makes the interpreter abort at shutdown ("could not acquire lock for
    <stdin>"). ``os.read`` holds no Python lock, so the blocked thread is simply abandoned.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""
        self._eof = False

    def readline(self, limit: int = -1) -> bytes:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0 and (limit < 0 or end < limit):
                line, self._buffer = self._buffer[: end + 1], self._buffer[end + 1 :]
                return line
            if limit >= 0 and len(self._buffer) >= limit:
                line, self._buffer = self._buffer[:limit], self._buffer[limit:]
                return line
            if self._eof:
                line, self._buffer = self._buffer, b""
                return line
            chunk = os.read(self.fd, 65536)
            if chunk:
                self._buffer += chunk
            else:
                self._eof = True


def decode_line(raw: bytes, number: int) -> tuple[str | None, str | None]:
    """(text, None) for a usable line or (None, notice) saying why the line is skipped."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, prompts.render(
            "console/not_utf8", line=number, byte=f"{raw[exc.start]:02x}", position=exc.start
        )
    if not text.strip():
        return None, prompts.render("console/empty_line", line=number)
    return text, None


def too_long_notice(number: int, cap: int = READ_CAP_BYTES) -> str:
    """The notice in place of a line over the read cap."""
    return prompts.render("console/too_long", line=number, cap=f"{cap:,}")


def no_answer_notice(timeout: float) -> str:
    """The notice in place of an answer that did not come within ``timeout`` seconds."""
    return prompts.render("console/no_answer", seconds=f"{timeout:.0f}")


def _in_daemon_thread(fn: Callable[[LineSource], T], arg: LineSource) -> asyncio.Future[T]:
    """Run a blocking read in a daemon thread.

    ``asyncio.to_thread`` would use the default executor, which ``asyncio.run`` joins on exit:
    after Ctrl-C the process would hang until the user pressed Enter.
    """
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def work() -> None:
        try:
            result = fn(arg)
        except BaseException as exc:  # delivered to the awaiting coroutine
            loop.call_soon_threadsafe(_settle, future, None, exc)
        else:
            loop.call_soon_threadsafe(_settle, future, result, None)

    threading.Thread(target=work, name="console-stdin", daemon=True).start()
    return future


def _settle(future: asyncio.Future[T], result: T | None, exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(result)  # type: ignore[arg-type]


class ConsoleAdapter:
    """Reads stdin, publishes ChatMessages, prints the Reply to each, one at a time."""

    def __init__(
        self,
        bus: EventBus,
        *,
        stdin: LineSource,
        stdout: TextIO,
        user: str = "you",
        interactive: bool = False,
        bot_name: str = "Chorus",
        reply_timeout: float = 600.0,
        json_output: bool = False,
        terminal: Terminal | None = None,
    ) -> None:
        self.bus = bus
        self.stdin = stdin
        self.stdout = stdout
        self.user = user
        self.interactive = interactive
        self.bot_name = bot_name
        self.reply_timeout = reply_timeout
        self.json_output = json_output
        self.terminal = terminal  # the screen on a TTY (drafts shown, Markdown, history)
        self.conversation = ConversationKey(platform=PLATFORM, channel=user)
        self.author = Author(id=user, display_name=user, roles=frozenset({Role.OWNER}))
        self._pending: dict[str, asyncio.Future[Reply]] = {}
        self._answered: deque[str] = deque(maxlen=64)  # lines answered: more replies are extra
        self._listener: asyncio.Task[None] | None = None

    async def run(self) -> int:
        """Chat until end of input. Returns a process exit code."""
        self._listener = asyncio.create_task(self._listen(), name="console-listener")
        try:
            if self.terminal is not None:
                return await self._converse(self.terminal)
            number = 0
            while True:
                if self.interactive:
                    self._write_prompt()
                item = await _in_daemon_thread(read_line, self.stdin)
                if item is None:
                    break
                number += 1
                raw, cut = item
                if cut:
                    self._emit(number, too_long_notice(number), notice=True)
                    continue
                text, notice = decode_line(raw, number)
                if text is None:
                    if not (self.interactive and raw.strip() == b""):
                        self._emit(number, notice or "", notice=True)
                    continue
                reply = await self._ask(text)
                if reply is None:
                    self._emit(number, no_answer_notice(self.reply_timeout), notice=True)
                else:
                    self._emit(number, reply.text, error=reply.is_error)
            return 0
        finally:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)

    async def _converse(self, terminal: Terminal) -> int:
        """The terminal session: read with line editing, show the answer as it is written."""
        try:
            while True:
                text = await terminal.read()
                if text is None:
                    return 0
                if not text.strip():
                    continue
                terminal.waiting()
                reply = await self._ask(text)
                if reply is None:
                    terminal.notice(no_answer_notice(self.reply_timeout))
                else:
                    terminal.answer(reply.text, error=reply.is_error)
        finally:
            terminal.close()

    async def ask(self, text: str) -> Reply | None:
        """One message and its answer without reading stdin (benchmarks): the answer is shown
        on the terminal, drafts included, as in a session. ``aclose`` ends the listening."""
        if self._listener is None:
            self._listener = asyncio.create_task(self._listen(), name="console-listener")
        if self.terminal is not None:
            self.terminal.waiting()
        reply = await self._ask(text)
        if self.terminal is not None:
            self.terminal.answer(reply.text if reply else "", error=reply is None)
        return reply

    async def aclose(self) -> None:
        if self._listener is not None:
            self._listener.cancel()
            await asyncio.gather(self._listener, return_exceptions=True)
            self._listener = None

    async def _ask(self, text: str) -> Reply | None:
        message = ChatMessage(
            platform=PLATFORM,
            id=uuid.uuid4().hex,
            conversation=self.conversation,
            author=self.author,
            text=text,
            is_direct=True,
        )
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._pending[message.id] = future
        try:
            await self.bus.publish(INBOUND, message)
            return await asyncio.wait_for(future, self.reply_timeout)
        except TimeoutError:
            log.error(
                "no reply in time",
                extra={"message_id": message.id, "timeout_s": self.reply_timeout},
            )
            return None
        finally:
            self._pending.pop(message.id, None)

    async def _listen(self) -> None:
        topic = outbound_topic(PLATFORM)
        async for delivery in self.bus.consume(topic, Outbound, group="console"):
            reply = delivery.event.root
            future = self._pending.get(reply.reply_to_id or "")
            if isinstance(reply, ReplyDraft):
                if self.terminal is not None and future is not None and not future.done():
                    self.terminal.draft(reply)
                await delivery.ack()
                continue
            answered = reply.reply_to_id in self._answered or (future is not None and future.done())
            unsolicited = reply.reply_to_id is None or answered
            if reply.conversation == self.conversation and unsolicited:
                self._said(reply)  # a plugin's message, beside the answers
            elif reply.conversation != self.conversation or future is None:
                log.warning(
                    "reply for an unknown console message dropped",
                    extra={"reply_to_id": reply.reply_to_id},
                )
            else:
                future.set_result(reply)
                self._answered.append(reply.reply_to_id or "")
            await delivery.ack()

    def _said(self, reply: Reply) -> None:
        if self.terminal is not None:
            self.terminal.notice(reply.text)
        else:
            self._emit(0, reply.text, error=reply.is_error)

    def _write_prompt(self) -> None:
        self.stdout.write(f"{self.user}> ")
        self.stdout.flush()

    def _emit(self, number: int, text: str, *, notice: bool = False, error: bool = False) -> None:
        if self.json_output:
            line = json.dumps(
                {"line": number, "text": text, "notice": notice, "error": error or notice},
                ensure_ascii=False,
            )
        elif notice:
            line = f"[chorus] {text}"
        elif self.interactive:
            line = f"{self.bot_name}> {text}"
        else:
            line = one_line(text)
        self.stdout.write(line + "\n")
        self.stdout.flush()


def one_line(text: str) -> str:
    """``text`` on one line, reversibly: backslash, carriage return and line feed escaped as
    ``printf '%b'`` reads them, so a piped answer never spans two output lines."""
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")
