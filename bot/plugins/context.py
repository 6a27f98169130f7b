"""What the bot gives each plugin at run time: its settings and its storage.

Every ``Plugin`` has one ``PluginServices``; the loader fills in the settings (``config``) and the
composition root the store (``kv``) once the connection exists, and every context a handler gets
reaches them through it. A plugin loaded without the bot around it (a unit test calling a handler
with ``CommandContext(message, args)``) has neither, and says so when asked.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from bot.events import ChatMessage, ConversationKey, ModerationRequest
from bot.plugins.config import PluginConfig
from bot.plugins.reach import Reach
from bot.plugins.store import PluginStore
from bot.state.plugin_store import Owner, PluginKV

M = TypeVar("M", bound=BaseModel)


class PluginServices:
    """One plugin's settings and store."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.config: PluginConfig | None = None
        self.kv: PluginKV | None = None
        self.reach: Reach | None = None

    def reaching(self) -> Reach:
        if self.reach is None:
            raise RuntimeError(f"plugin {self.name}: no sending here (the bot is not running)")
        return self.reach

    async def send(
        self, conversation: ConversationKey, text: str, answering: ChatMessage | None = None
    ) -> None:
        await self.reaching().send(self.name, conversation, text, answering)

    async def moderate(self, request: ModerationRequest) -> None:
        """Hand ``request`` to its platform's gateway (performed once, audited)."""
        await self.reaching().moderate(self.name, request)

    async def ask(
        self,
        prompt: str,
        *,
        system: str | None = None,
        max_tokens: int | None = None,
        about: ChatMessage | None = None,
    ) -> str:
        return await self.reaching().ask(
            self.name, prompt, system=system, max_tokens=max_tokens, about=about
        )

    def settings(self, model: type[M], message: ChatMessage | None = None) -> M:
        """The plugin's settings as ``model`` (its ``@settings`` class), for ``message``'s
        place when given (its scopes' ``[scope.plugins.NAME]`` over ``[plugins.NAME]``)."""
        if message is None:
            return self.settings_at(model, None, None, None)
        return self.settings_at(
            model, message.platform, message.server, message.conversation.channel
        )

    def settings_at(
        self, model: type[M], platform: str | None, server: str | None, channel: str | None
    ) -> M:
        """The settings for a place given by its ids (None: ``[plugins.NAME]`` alone)."""
        config = self.config
        if config is None or config.model is not model:
            declared = config.model.__name__ if config is not None else "none"
            raise LookupError(
                f"plugin {self.name}: {model.__name__} is not its @settings model "
                f"(declared: {declared})"
            )
        found = config.base if platform is None else config.at(platform, server, channel or "")
        assert isinstance(found, model)
        return found

    def store(self, message: ChatMessage | None = None) -> PluginStore:
        if self.kv is None:
            raise RuntimeError(f"plugin {self.name}: no store here (the bot is not running)")
        return PluginStore(self.kv, self.name, message)


class MessageContext:
    """What every context about a message offers (a command's, an event's): ``user``,
    ``store`` and ``settings``, through the plugin's services. A subclass has the fields
    ``message`` and ``services``."""

    message: ChatMessage
    services: PluginServices | None

    @property
    def user(self) -> Owner:
        """Whoever wrote the message, as an owner for ``store`` writes ``/forget`` reaches."""
        return Owner(self.message.platform, self.message.author.id)

    @property
    def store(self) -> PluginStore:
        """The plugin's storage, its ``channel``/``server``/``user`` places this message's."""
        return self._services().store(self.message)

    def settings(self, model: type[M]) -> M:
        """The plugin's ``@settings`` model with its values for this message's place."""
        return self._services().settings(model, self.message)

    async def send(self, conversation: ConversationKey, text: str) -> None:
        """Send ``text`` to ``conversation`` (any the bot is in), through the outbound check
        and the platform's sending chokepoint."""
        await self._services().send(conversation, text)

    async def reply(self, text: str) -> None:
        """Send ``text`` to this message's conversation, as an answer to it."""
        await self._services().send(self.message.conversation, text, self.message)

    async def moderate(self, request: ModerationRequest) -> None:
        """Ask the platform to delete, time out or ban (``request``): performed once by the
        gateway through the platform's API, the bot's permission checked first, and audited."""
        await self._services().moderate(request)

    async def ask(
        self, prompt: str, *, system: str | None = None, max_tokens: int | None = None
    ) -> str:
        """The configured model's answer to ``prompt`` (against the daily cost cap; in this
        conversation's turn log)."""
        return await self._services().ask(
            prompt, system=system, max_tokens=max_tokens, about=self.message
        )

    def _services(self) -> PluginServices:
        if self.services is None:
            raise RuntimeError("this context has no plugin services (the bot is not running)")
        return self.services
