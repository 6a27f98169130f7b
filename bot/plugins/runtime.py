"""Running what plugins added, contained: their commands and their event hooks.

A plugin's code runs inside someone else's bot, so every call into it is bounded in time and
nothing it raises leaves here: no ``Exception``, and no ``SystemExit``, ``KeyboardInterrupt``
or ``GeneratorExit`` either, since asyncio carries the first two out of the event loop and one
``sys.exit()`` in a plugin would end the worker. Only cancellation goes on up. (A
``GeneratorExit`` that closes the turn's own coroutine is raised again in the caller by Python
itself, so containing it never keeps a closed turn going.)

Its tools need nothing of this module: they go into the one ``Toolbox`` with the built-ins and
inherit its permissions, timeouts, per-channel enabling, error results and the same
containment. Its commands get the same treatment as tools: a permission checked against the
speaker's roles, a timeout, and an error or a timeout answered with a short line
(``prompts/plugins/*``) while the log gets the traceback. Hooks are told apart by when they run:

* ``before_turn`` hooks run in load order before the model is asked; text they return joins
  the turn's context block, which sits after the cached prefix, so a hook never costs a cache
  miss. A failing or slow hook adds nothing and the turn goes on.
* ``after_reply`` hooks run in the background once the answer is committed, so they never
  delay the next message; the tasks are kept and, at shutdown, given their timeout to end.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import prompts
from bot.events import ChatMessage
from bot.plugins.api import CommandContext, Hook, PluginCommand
from bot.plugins.context import PluginServices
from bot.plugins.events import PluginEvents
from bot.tools.base import Permission

log = logging.getLogger("chorus.plugins")

_DENIED = {
    Permission.MODERATOR: "plugins/denied_moderators",
    Permission.OWNER: "plugins/denied_owner",
}

TextHandler = Callable[[ChatMessage, str], Awaitable[str]]


def command_handler(command: PluginCommand, services: PluginServices | None = None) -> TextHandler:
    """``command`` as a text command handler ``(message, args) -> reply`` that never raises;
    ``services``: its plugin's settings and store, reached through the context."""

    async def handle(message: ChatMessage, args: str) -> str:
        name = command.name
        if not command.permission.allows(message.author.roles):
            return prompts.render(_DENIED[command.permission], command=name)
        try:
            async with asyncio.timeout(command.timeout):
                context = CommandContext(message=message, args=args, services=services)
                text = await command.handler(context)
        except TimeoutError:
            log.warning("plugin command timed out", extra={"command": name})
            return prompts.render("plugins/command_timeout", command=name)
        except Exception:
            log.exception("plugin command raised", extra={"command": name})
            return prompts.render("plugins/command_failed", command=name)
        except asyncio.CancelledError:
            raise
        except BaseException:  # SystemExit, KeyboardInterrupt, GeneratorExit
            log.exception(
                "plugin command raised a BaseException; contained", extra={"command": name}
            )
            return prompts.render("plugins/command_failed", command=name)
        if text is None or (isinstance(text, str) and not text.strip()):
            return prompts.render("plugins/command_done", command=name)
        return text if isinstance(text, str) else str(text)

    return handle


class TurnHooks:
    """The plugins' event hooks of one process; ``TurnHooks(())`` does nothing, cheaply."""

    def __init__(
        self,
        hooks: Sequence[Hook] = (),
        *,
        timeout: float = 5.0,
        events: PluginEvents | None = None,
    ) -> None:
        self._before = [h for h in hooks if h.kind == "before_turn"]
        self._after = [h for h in hooks if h.kind == "after_reply"]
        self._timeout = timeout
        self._tasks: set[asyncio.Task[None]] = set()
        self.events = events or PluginEvents()  # on_message, on_stream_event, on_reply

    def __bool__(self) -> bool:
        return bool(self._before or self._after)

    def replace(self, hooks: Sequence[Hook]) -> None:
        """Swap in the hooks of the plugins now loaded (a reload); running ones finish."""
        self._before = [h for h in hooks if h.kind == "before_turn"]
        self._after = [h for h in hooks if h.kind == "after_reply"]

    def replied(self, message: ChatMessage, reply: str) -> None:
        """A reply went out: the ``on_reply`` handlers, in the background."""
        self.events.replied(message, reply)

    async def before_turn(self, message: ChatMessage, context: str) -> str:
        """``context`` with what the ``before_turn`` hooks returned appended, one per line."""
        for hook in self._before:
            added = await self._call(hook, message)
            if isinstance(added, str) and added.strip():
                context = f"{context}\n{added.strip()}" if context else added.strip()
        return context

    def after_reply(self, message: ChatMessage, reply: str) -> None:
        """Start the ``after_reply`` hooks in the background (a kept task), and ``on_reply``."""
        self.events.replied(message, reply)
        if not self._after:
            return
        task = asyncio.create_task(self._after_reply(message, reply), name="plugin-after-reply")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _after_reply(self, message: ChatMessage, reply: str) -> None:
        for hook in self._after:
            await self._call(hook, message, reply)

    async def _call(self, hook: Hook, *args: Any) -> Any:
        timeout = hook.timeout if hook.timeout is not None else self._timeout
        try:
            async with asyncio.timeout(timeout):
                return await hook.func(*args)
        except TimeoutError:
            log.warning(
                "plugin hook timed out",
                extra={"hook": hook.name, "kind": hook.kind, "seconds": timeout},
            )
        except Exception:
            log.exception("plugin hook raised", extra={"hook": hook.name, "kind": hook.kind})
        except asyncio.CancelledError:
            raise
        except BaseException:  # SystemExit, KeyboardInterrupt, GeneratorExit
            log.exception(
                "plugin hook raised a BaseException; contained",
                extra={"hook": hook.name, "kind": hook.kind},
            )
        return None

    async def aclose(self) -> None:
        """Let running ``after_reply`` hooks and event handlers finish within their timeout,
        then cancel them."""
        await self.events.aclose()
        tasks = list(self._tasks)
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=self._timeout)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
