"""What a tool is, to the agent: a spec the model sees, a permission, a timeout, and ``call``.

Python functions (``bot/tools/function.py``), built-in tools and MCP server tools all implement
this one protocol, so the tool loop never cares where a tool comes from. A tool returns text;
anything it raises is turned into an ``is_error`` tool result by the ``Toolbox``, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol, runtime_checkable

from bot.events import ChatMessage, Role
from bot.llm.types import ToolSpec


class Permission(StrEnum):
    """Who may trigger a tool: anyone, moderators (and owners), or owners only."""

    EVERYONE = "everyone"
    MODERATOR = "moderator"
    OWNER = "owner"

    def allows(self, roles: frozenset[Role]) -> bool:
        if self is Permission.EVERYONE:
            return True
        if self is Permission.MODERATOR:
            return bool(roles & {Role.MODERATOR, Role.OWNER})
        return Role.OWNER in roles


class ToolFilter(Protocol):
    """A scope's tool lists (``bot.tools.toolbox.ChannelToolConfig``); hashable."""

    def allows(self, name: str) -> bool: ...

    def __hash__(self) -> int: ...


@dataclass(frozen=True)
class ToolContext:
    """Who asked, and where: the message that started the turn, and the tool lists of its
    scope (``chorus.toml``), which replace the deployment's there (None: the deployment's)."""

    message: ChatMessage
    tools: ToolFilter | None = None

    @property
    def channel_key(self) -> str:
        """``platform:channel`` (threads share their channel's tool settings)."""
        conv = self.message.conversation
        return f"{conv.platform}:{conv.channel}"


class ToolError(Exception):
    """Raised by a tool to report a failure the model should see and may work around."""


@runtime_checkable
class Tool(Protocol):
    spec: ToolSpec
    permission: Permission
    timeout: float

    async def call(self, arguments: dict[str, Any], ctx: ToolContext) -> str: ...
