"""Plugin events: ``@on_message``, ``@on_stream_event``, ``@on_reply``, run off the reply path.

* ``on_message``: every line the bot sees that passed the safety screen, ambient lines of a
  live chat and lines it will not answer included (a redelivery after a worker died is not
  seen twice).
* ``on_stream_event``: a line that carries a ``StreamEvent`` (a raid, sub, gift, cheer, Super
  Chat...: ``ctx.stream_event``), after the screen too.
* ``on_screened``: a line the safety screen took out (dropped or refused: a rule it broke, or
  a user the bot ignores), which ``on_message`` never sees; for a moderation plugin that acts
  on what the bot itself will not read.
* ``on_reply``: each reply the bot sent (``ctx.reply_text``), for the message it answers.
* ``on_member_join``, ``on_member_leave``, ``on_reaction`` (Discord), ``on_stream_online``,
  ``on_stream_offline`` (Twitch's stream state; YouTube's broadcast chat followed or over): what
  a platform reports besides lines (``ChannelEvent``), riding the inbound topic as a message
  without text that the router never answers (``ctx.channel_event``; ``ctx.user`` is who did
  it).

A handler is ``async def f(ctx: EventContext) -> None``. ``PluginEvents.emit`` only starts tasks
and returns, so no handler ever delays a turn. Each call has a time limit (the handler's
``timeout``, else ``CHORUS_PLUGIN_HOOK_TIMEOUT``) and each plugin at most
``CHORUS_PLUGIN_EVENT_CONCURRENCY`` calls running: past that an event is dropped for that plugin
(logged, counted), never queued without bound. Whatever a handler raises, ``SystemExit`` and
``KeyboardInterrupt`` included, is logged and counted (``chorus_plugin_events_total{plugin,
kind,outcome}``: ok, error, timeout, dropped) and goes no further; the tasks are kept and given
their time limit at shutdown.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, overload

from bot.events import ChannelEvent, ChannelEventKind, ChatMessage, StreamEvent
from bot.plugins.context import MessageContext, PluginServices

log = logging.getLogger("chorus.plugins")

EventKind = Literal[
    "message",
    "screened",
    "stream_event",
    "reply",
    "member_join",
    "member_leave",
    "reaction",
    "stream_online",
    "stream_offline",
]
_CHANNEL: dict[ChannelEventKind, EventKind] = {
    ChannelEventKind.MEMBER_JOIN: "member_join",
    ChannelEventKind.MEMBER_LEAVE: "member_leave",
    ChannelEventKind.REACTION_ADD: "reaction",
    ChannelEventKind.REACTION_REMOVE: "reaction",
    ChannelEventKind.STREAM_ONLINE: "stream_online",
    ChannelEventKind.STREAM_OFFLINE: "stream_offline",
}


@dataclass(frozen=True)
class EventContext(MessageContext):
    """What an event handler gets: the event's kind and message, and the plugin's services."""

    kind: EventKind
    message: ChatMessage
    reply_text: str | None = None  # on_reply: the text the bot sent
    services: PluginServices | None = None

    @property
    def stream_event(self) -> StreamEvent | None:
        return self.message.stream_event

    @property
    def channel_event(self) -> ChannelEvent | None:
        """A join, leave or reaction (its ``kind``; a reaction's ``emoji`` and ``message_id``);
        ``ctx.user`` is who did it, ``ctx.message.conversation`` where."""
        return self.message.channel_event


EventFunction = Callable[[EventContext], Awaitable[object]]


@dataclass(frozen=True)
class EventHandler:
    """One subscription of a plugin: ``kind`` and the handler, with an optional time limit."""

    kind: EventKind
    func: EventFunction
    timeout: float | None = None
    name: str = field(default="")

    def __post_init__(self) -> None:
        if not inspect.iscoroutinefunction(self.func):
            raise TypeError(f"on_{self.kind} handler must be an `async def` function")
        if not self.name:
            object.__setattr__(self, "name", getattr(self.func, "__qualname__", repr(self.func)))
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"on_{self.kind} handler {self.name}: timeout must be positive")


@overload
def on_message(func: EventFunction, /) -> EventHandler: ...
@overload
def on_message(*, timeout: float | None = None) -> Callable[[EventFunction], EventHandler]: ...
def on_message(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """Every line seen (after the safety screen), ambient ones included."""
    if func is not None:
        return EventHandler("message", func, timeout)
    return lambda f: EventHandler("message", f, timeout)


@overload
def on_stream_event(func: EventFunction, /) -> EventHandler: ...
@overload
def on_stream_event(*, timeout: float | None = None) -> Callable[[EventFunction], EventHandler]: ...
def on_stream_event(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """A raid, sub, gift, cheer, Super Chat... (``ctx.stream_event``)."""
    if func is not None:
        return EventHandler("stream_event", func, timeout)
    return lambda f: EventHandler("stream_event", f, timeout)


@overload
def on_screened(func: EventFunction, /) -> EventHandler: ...
@overload
def on_screened(*, timeout: float | None = None) -> Callable[[EventFunction], EventHandler]: ...
def on_screened(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """A line the safety screen took out (``on_message`` never sees it)."""
    if func is not None:
        return EventHandler("screened", func, timeout)
    return lambda f: EventHandler("screened", f, timeout)


@overload
def on_reply(func: EventFunction, /) -> EventHandler: ...
@overload
def on_reply(*, timeout: float | None = None) -> Callable[[EventFunction], EventHandler]: ...
def on_reply(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """Each reply the bot sent (``ctx.reply_text``), with the message it answers."""
    if func is not None:
        return EventHandler("reply", func, timeout)
    return lambda f: EventHandler("reply", f, timeout)


@overload
def on_member_join(func: EventFunction, /) -> EventHandler: ...
@overload
def on_member_join(*, timeout: float | None = None) -> Callable[[EventFunction], EventHandler]: ...
def on_member_join(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """Someone joined the server (Discord, with DISCORD_MEMBERS_INTENT); ``ctx.user`` is who,
    ``ctx.message.conversation`` the server's system channel."""
    if func is not None:
        return EventHandler("member_join", func, timeout)
    return lambda f: EventHandler("member_join", f, timeout)


@overload
def on_member_leave(func: EventFunction, /) -> EventHandler: ...
@overload
def on_member_leave(*, timeout: float | None = None) -> Callable[[EventFunction], EventHandler]: ...
def on_member_leave(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """Someone left the server (Discord, with DISCORD_MEMBERS_INTENT)."""
    if func is not None:
        return EventHandler("member_leave", func, timeout)
    return lambda f: EventHandler("member_leave", f, timeout)


@overload
def on_reaction(func: EventFunction, /) -> EventHandler: ...
@overload
def on_reaction(*, timeout: float | None = None) -> Callable[[EventFunction], EventHandler]: ...
def on_reaction(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """A reaction added or taken back (Discord): ``ctx.channel_event`` has the kind, the
    emoji and the message."""
    if func is not None:
        return EventHandler("reaction", func, timeout)
    return lambda f: EventHandler("reaction", f, timeout)


@overload
def on_stream_online(func: EventFunction, /) -> EventHandler: ...
@overload
def on_stream_online(
    *, timeout: float | None = None
) -> Callable[[EventFunction], EventHandler]: ...
def on_stream_online(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """The channel went live (Twitch, with TWITCH_STREAM_STATE=true); ``ctx.user`` is the
    broadcaster, ``ctx.message.conversation`` the channel's chat."""
    if func is not None:
        return EventHandler("stream_online", func, timeout)
    return lambda f: EventHandler("stream_online", f, timeout)


@overload
def on_stream_offline(func: EventFunction, /) -> EventHandler: ...
@overload
def on_stream_offline(
    *, timeout: float | None = None
) -> Callable[[EventFunction], EventHandler]: ...
def on_stream_offline(
    func: EventFunction | None = None, /, *, timeout: float | None = None
) -> EventHandler | Callable[[EventFunction], EventHandler]:
    """The channel's stream ended (Twitch, with TWITCH_STREAM_STATE=true)."""
    if func is not None:
        return EventHandler("stream_offline", func, timeout)
    return lambda f: EventHandler("stream_offline", f, timeout)


@dataclass(frozen=True)
class Subscriber:
    """A plugin's handlers, with its services (what the dispatcher needs of a ``Plugin``)."""

    plugin: str
    handlers: Sequence[EventHandler]
    services: PluginServices | None = None


class PluginEvents:
    """The plugins' event handlers of one process; ``PluginEvents(())`` does nothing."""

    def __init__(
        self, subscribers: Sequence[Subscriber] = (), *, timeout: float = 5.0, concurrency: int = 8
    ) -> None:
        self._subscribers = [s for s in subscribers if s.handlers]
        self._timeout = timeout
        self._concurrency = concurrency
        self._running: Counter[str] = Counter()
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts: Counter[tuple[str, str, str]] = Counter()  # (plugin, kind, outcome)

    def __bool__(self) -> bool:
        return bool(self._subscribers)

    def replace(self, subscribers: Sequence[Subscriber]) -> None:
        """Swap in the handlers of the plugins now loaded (a reload); running ones finish."""
        self._subscribers = [s for s in subscribers if s.handlers]

    @property
    def running(self) -> int:
        """Handler calls started and not ended yet."""
        return len(self._tasks)

    def seen(self, message: ChatMessage) -> None:
        """A line passed the screen: ``on_message``, and ``on_stream_event`` when it has one;
        a join, a leave or a reaction: its own handlers only."""
        if message.channel_event is not None:
            self.emit(_CHANNEL[message.channel_event.kind], message)
            return
        self.emit("message", message)
        if message.stream_event is not None:
            self.emit("stream_event", message)

    def screened(self, message: ChatMessage) -> None:
        """A line the screen took out: ``on_screened`` only."""
        self.emit("screened", message)

    def replied(self, message: ChatMessage, text: str) -> None:
        self.emit("reply", message, text)

    def emit(self, kind: EventKind, message: ChatMessage, reply: str | None = None) -> None:
        """Start every handler of ``kind``; never waits, never raises."""
        for subscriber in self._subscribers:
            for handler in subscriber.handlers:
                if handler.kind != kind:
                    continue
                if self._running[subscriber.plugin] >= self._concurrency:
                    self._count(subscriber.plugin, kind, "dropped")
                    log.warning(
                        "plugin event dropped: the plugin's handlers are all busy",
                        extra={"plugin": subscriber.plugin, "kind": kind, "handler": handler.name},
                    )
                    continue
                context = EventContext(kind, message, reply, subscriber.services)
                self._running[subscriber.plugin] += 1
                task = asyncio.create_task(
                    self._call(subscriber.plugin, handler, context), name=f"plugin-{kind}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _call(self, plugin: str, handler: EventHandler, context: EventContext) -> None:
        timeout = handler.timeout if handler.timeout is not None else self._timeout
        where = {"plugin": plugin, "kind": handler.kind, "handler": handler.name}
        outcome = "cancelled"  # unless the call ends by itself
        try:
            outcome = await contained(
                lambda: handler.func(context), timeout, "plugin event handler", where
            )
        finally:
            self._running[plugin] -= 1
            self._count(plugin, handler.kind, outcome)

    def _count(self, plugin: str, kind: str, outcome: str) -> None:
        self.counts[plugin, kind, outcome] += 1

    def series(self) -> dict[tuple[str, ...], float]:
        """The counts as metric series (``chorus_plugin_events_total``)."""
        return {key: float(n) for key, n in self.counts.items()}

    async def aclose(self) -> None:
        """Let running handlers finish within their time limit, then cancel them."""
        tasks = list(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self._timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def contained(
    call: Callable[[], Awaitable[object]], seconds: float, what: str, where: dict[str, str]
) -> Literal["ok", "timeout", "error"]:
    """Run a plugin's ``call`` within ``seconds``; how it ended, never raising what it raised
    (an exception, ``SystemExit`` included, or running too long is logged as ``what`` with
    ``where``). Cancellation still propagates: it is the caller's, not the plugin's. Event
    handlers and timers share it, so both are contained alike."""
    try:
        async with asyncio.timeout(seconds):
            await call()
    except TimeoutError:
        log.warning(f"{what} timed out", extra={**where, "seconds": seconds})
        return "timeout"
    except Exception:
        log.exception(f"{what} raised", extra=where)
        return "error"
    except asyncio.CancelledError:
        raise
    except BaseException:  # SystemExit, KeyboardInterrupt, GeneratorExit
        log.exception(f"{what} raised a BaseException; contained", extra=where)
        return "error"
    return "ok"
