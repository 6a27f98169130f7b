"""A built-in plugin loaded the way ``chorus run`` loads it (from ``[plugins.NAME]`` in a
``chorus.toml``), on the in-memory store, its sends recorded: what the built-in plugins' unit
tests drive their handlers with."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bot.events import Author, ChatMessage, ConversationKey, Role
from bot.plugins import EventContext, Plugin
from bot.plugins.events import EventKind
from bot.plugins.loader import load_plugins
from bot.plugins.reach import Reach
from bot.settings import load_settings
from bot.state.plugin_store import MemoryPluginStore, PluginKV

KEYS = {"ANTHROPIC_API_KEY": "sk-ant-test-key-0001"}


@dataclass
class Rig:
    plugin: Plugin
    sent: list[tuple[ConversationKey, str]] = field(default_factory=list)
    serial: int = 0

    def message(
        self,
        text: str,
        user: str = "7",
        *,
        roles: frozenset[Role] = frozenset(),
        platform: str = "twitch",
        channel: str = "1971641",
        server: str | None = "streamer",
    ) -> ChatMessage:
        self.serial += 1
        return ChatMessage(
            platform=platform,
            id=f"m{self.serial}",
            conversation=ConversationKey(platform=platform, channel=channel),
            author=Author(id=user, display_name=f"fan{user}", roles=roles),
            text=text,
            server=server,
        )

    async def emit(self, kind: EventKind, message: ChatMessage) -> None:
        for handler in self.plugin.events:
            if handler.kind == kind:
                await handler.func(EventContext(kind, message, None, self.plugin.services))

    async def say(
        self, text: str, user: str = "7", roles: frozenset[Role] = frozenset()
    ) -> list[str]:
        """What the bot sends back to ``text`` (its handlers run to the end first)."""
        before = len(self.sent)
        await self.emit("message", self.message(text, user, roles=roles))
        return [t for _, t in self.sent[before:]]


def load(name: str, toml: str, kv: PluginKV | None = None) -> Rig:
    """Built-in ``name`` with ``toml`` as the whole ``chorus.toml`` (in the test's directory),
    on ``kv`` (the in-memory store unless given)."""
    Path("chorus.toml").write_text(toml.lstrip("\n"), encoding="utf-8")
    settings = load_settings(environ=KEYS, warn=False)
    loaded = load_plugins(settings.plugins, file=settings.file, variables=settings.variable)
    (plugin,) = [p for p in loaded.plugins if p.name == name]
    rig = Rig(plugin)

    async def send(
        plugin: str, conversation: ConversationKey, text: str, answering: ChatMessage | None
    ) -> None:
        rig.sent.append((conversation, text))

    loaded.bind(kv or MemoryPluginStore(), Reach(send))
    return rig
