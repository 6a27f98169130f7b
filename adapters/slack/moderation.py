"""Slack moderation actions: the bot may delete its own messages, and nothing else.

A bot token's ``chat.delete`` removes only messages the bot posted (anyone else's answers
``cant_delete_message``: deleting them takes a user token of a workspace admin), and Slack has
no timeout or ban a bot can give; removing someone from a channel or the workspace is an admin's
decision. ``capabilities()`` says so, and those actions answer ``not_allowed`` with the reason,
without calling Slack.

``chat.delete`` runs through the adapter's ``SlackSender`` (its per-method window and retries),
like the deletes of a streamed answer.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from adapters.slack.sender import SlackSender, SlackSendError
from bot.events import ConversationKey
from bot.platform.moderation import (
    Action,
    ActionResult,
    Capabilities,
    Outcome,
    PermissionGaps,
    not_allowed,
)

PLATFORM = "slack"
OWN_ONLY = (
    "Slack lets a bot delete only the messages it posted itself; anyone else's message is "
    "removed by a workspace admin"
)
NO_MEMBER_ACTIONS = (
    "not allowed for bots on Slack: a bot cannot time out or ban anyone (a workspace admin "
    "removes people from channels or the workspace)"
)
SCOPE_HELP = (
    "the Slack app's bot token lacks the chat:write scope; add it under OAuth & Permissions "
    "-> Bot Token Scopes at https://api.slack.com/apps and reinstall the app"
)


class SlackModeration:
    """``ModerationActions`` over the adapter's ``SlackSender``."""

    platform = PLATFORM

    def __init__(
        self,
        sender: SlackSender,
        sender_for: Callable[[str], Awaitable[SlackSender]] | None = None,
    ) -> None:
        """``sender_for(channel)``: the sender with the token of the channel's workspace (an app
        installed in many workspaces); otherwise ``sender`` is used everywhere."""
        self.sender = sender
        self.sender_for = sender_for
        self.gaps = PermissionGaps(PLATFORM)

    def capabilities(self) -> Capabilities:
        refused: dict[Action, str] = {
            a: NO_MEMBER_ACTIONS for a in Action if a is not Action.DELETE
        }
        return Capabilities(
            PLATFORM, frozenset({Action.DELETE}), refused=refused, own_messages_only=True
        )

    async def delete_message(
        self, conversation: ConversationKey, message_id: str, *, reason: str = ""
    ) -> ActionResult:
        channel = conversation.channel
        known = self.gaps.known(channel, "chat:write", Action.DELETE)
        if known is not None:
            return known
        try:
            sender = self.sender if self.sender_for is None else await self.sender_for(channel)
            await sender.stream_call("chat.delete", channel=channel, ts=message_id)
        except SlackSendError as exc:
            if exc.error == "cant_delete_message":
                return ActionResult(Action.DELETE, Outcome.NOT_ALLOWED, OWN_ONLY)
            if exc.error == "message_not_found":
                return ActionResult(Action.DELETE, Outcome.NOT_FOUND, "message_not_found")
            if exc.error == "missing_scope":
                return self.gaps.missing(channel, "chat:write", Action.DELETE, SCOPE_HELP)
            return ActionResult(Action.DELETE, Outcome.FAILED, str(exc))
        except LookupError as exc:  # the workspace is not installed (any more)
            return ActionResult(Action.DELETE, Outcome.FAILED, str(exc))
        return ActionResult(Action.DELETE, Outcome.DONE)

    async def timeout(
        self, conversation: ConversationKey, user_id: str, seconds: int, reason: str
    ) -> ActionResult:
        return not_allowed(self.capabilities(), Action.TIMEOUT)

    async def untimeout(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        return not_allowed(self.capabilities(), Action.UNTIMEOUT)

    async def ban(self, conversation: ConversationKey, user_id: str, reason: str) -> ActionResult:
        return not_allowed(self.capabilities(), Action.BAN)

    async def unban(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        return not_allowed(self.capabilities(), Action.UNBAN)
