"""Discord moderation actions through discord.py's public API (``ModerationActions``).

- delete a message: ``DELETE /channels/{c}/messages/{m}`` through discord.py's HTTP client (the
  route ``Message.delete`` uses, with the reason it does not pass), needs Manage Messages in
  that channel for anyone else's message;
- timeout and untimeout: ``Member.timeout(until, reason=...)``, a ``PATCH
  /guilds/{g}/members/{u}`` of ``communication_disabled_until`` (at most 28 days ahead; None
  lifts it), needs Moderate Members;
- ban and unban: ``Guild.ban`` / ``Guild.unban`` (``PUT``/``DELETE /guilds/{g}/bans/{u}``),
  needs Ban Members.

discord.py sends every ``reason`` as the ``X-Audit-Log-Reason`` header, so each action shows
in the server's audit log with why it was taken.

The permission is checked first, from discord.py's cache of the guild (the bot's roles and the
channel's overwrites, the same computation Discord makes); a 403 ("Missing Permissions", code
50013) says the same when the cache did not know. A missing one is logged once per channel,
naming the permission and where to grant it (``PermissionGaps``), and not asked about again.

Every call runs through the adapter's ``DiscordSender`` (discord.py's per-route rate limits,
our long-wait and connection retries; message deletes also within the channel's message
window), keyed like the sends it shares limits with.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Awaitable, Callable

import discord

from adapters.discord.convert import send_target
from adapters.discord.sender import DiscordSender
from bot.events import ConversationKey
from bot.platform.moderation import Action, ActionResult, Capabilities, Outcome, PermissionGaps

log = logging.getLogger("chorus.discord.moderation")

PLATFORM = "discord"
MAX_TIMEOUT = 28 * 24 * 3600  # Discord's longest timeout
MISSING_PERMISSIONS = 50013
UNKNOWN = frozenset({10007, 10008, 10013, 10026})  # member, message, user, ban
_PERMISSION = {
    Action.DELETE: ("manage_messages", "Manage Messages"),
    Action.TIMEOUT: ("moderate_members", "Moderate Members"),
    Action.UNTIMEOUT: ("moderate_members", "Moderate Members"),
    Action.BAN: ("ban_members", "Ban Members"),
    Action.UNBAN: ("ban_members", "Ban Members"),
}
GRANT_HELP = (
    "give the bot's role the {name} permission (Server Settings -> Roles -> the bot's role -> "
    "Permissions), make sure no channel override removes it, and keep the bot's role above "
    "the roles of the members it moderates"
)


class DiscordModeration:
    """``ModerationActions`` over the adapter's discord.py ``client`` and ``sender``."""

    platform = PLATFORM

    def __init__(self, client: discord.Client, sender: DiscordSender) -> None:
        self.client = client
        self.sender = sender
        self.gaps = PermissionGaps(PLATFORM)

    def capabilities(self) -> Capabilities:
        return Capabilities(PLATFORM, frozenset(Action), max_timeout_seconds=MAX_TIMEOUT)

    def _channel(
        self, conversation: ConversationKey
    ) -> discord.abc.GuildChannel | discord.Thread | None:
        channel = self.client.get_channel(send_target(conversation))
        if isinstance(channel, discord.abc.GuildChannel | discord.Thread):
            return channel
        return None

    def _refused(self, conversation: ConversationKey, action: Action) -> ActionResult | None:
        """A known or visible missing permission (None: go ahead)."""
        flag, name = _PERMISSION[action]
        known = self.gaps.known(conversation.channel, flag, action)
        if known is not None:
            return known
        channel = self._channel(conversation)
        if channel is None or channel.guild.me is None:
            return None  # not cached: Discord's answer will tell
        permissions = channel.permissions_for(channel.guild.me)
        if getattr(permissions, flag):
            return None
        return self._missing(conversation, action)

    def _missing(self, conversation: ConversationKey, action: Action) -> ActionResult:
        flag, name = _PERMISSION[action]
        channel = self._channel(conversation)
        where = f"the server {channel.guild.name}" if channel is not None else "this server"
        message = f"the bot lacks {name} in {where}; " + GRANT_HELP.format(name=name)
        return self.gaps.missing(conversation.channel, flag, action, message)

    async def _call(
        self,
        conversation: ConversationKey,
        action: Action,
        op: Callable[[], Awaitable[object]],
        *,
        key: str,
        message: bool = False,
    ) -> ActionResult:
        refused = self._refused(conversation, action)
        if refused is not None:
            return refused
        try:
            async with self.sender.lock(key):
                if message:
                    await self.sender.message_call(key, op, what=f"discord {action}")
                else:
                    await self.sender.call_locked(op, what=f"discord {action}", key=key)
        except discord.Forbidden as exc:
            if exc.code == MISSING_PERMISSIONS:
                return self._missing(conversation, action)
            return ActionResult(action, Outcome.FAILED, f"{exc.code}: {exc.text}")
        except discord.NotFound as exc:
            return ActionResult(action, Outcome.NOT_FOUND, f"{exc.code}: {exc.text}")
        except discord.HTTPException as exc:
            log.warning(
                "discord moderation action failed",
                extra={"action": str(action), "status": exc.status, "code": exc.code},
            )
            return ActionResult(action, Outcome.FAILED, f"HTTP {exc.status} {exc.code}: {exc.text}")
        self.gaps.granted(conversation.channel, _PERMISSION[action][0])
        return ActionResult(action, Outcome.DONE)

    def _guild(self, conversation: ConversationKey) -> discord.Guild | None:
        channel = self._channel(conversation)
        return channel.guild if channel is not None else None

    def _no_guild(self, action: Action) -> ActionResult:
        return ActionResult(action, Outcome.FAILED, "not a server channel the bot can see")

    # -- the actions ---------------------------------------------------------------------------
    async def delete_message(
        self, conversation: ConversationKey, message_id: str, *, reason: str = ""
    ) -> ActionResult:
        channel_id = send_target(conversation)

        def op() -> Awaitable[None]:  # (``Message.delete`` takes no reason; the route does)
            return self.client.http.delete_message(
                channel_id, int(message_id), reason=reason or None
            )

        return await self._call(
            conversation, Action.DELETE, op, key=f"channel:{channel_id}", message=True
        )

    async def timeout(
        self, conversation: ConversationKey, user_id: str, seconds: int, reason: str
    ) -> ActionResult:
        if not 1 <= seconds <= MAX_TIMEOUT:
            detail = f"a Discord timeout lasts 1 to {MAX_TIMEOUT} seconds, not {seconds}"
            return ActionResult(Action.TIMEOUT, Outcome.FAILED, detail)
        return await self._set_timeout(
            conversation, user_id, dt.timedelta(seconds=seconds), reason, Action.TIMEOUT
        )

    async def untimeout(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        return await self._set_timeout(conversation, user_id, None, reason, Action.UNTIMEOUT)

    async def _set_timeout(
        self,
        conversation: ConversationKey,
        user_id: str,
        until: dt.timedelta | None,
        reason: str,
        action: Action,
    ) -> ActionResult:
        guild = self._guild(conversation)
        if guild is None:
            return self._no_guild(action)
        lifted = False

        async def op() -> None:
            nonlocal lifted
            member = await guild.fetch_member(int(user_id))  # fresh: is it timed out now?
            if until is None and not member.is_timed_out():
                lifted = True
                return
            await member.timeout(until, reason=reason or None)

        result = await self._call(conversation, action, op, key=f"guild:{guild.id}")
        if lifted:
            return ActionResult(action, Outcome.NOT_FOUND, "the member is not timed out")
        return result

    async def ban(self, conversation: ConversationKey, user_id: str, reason: str) -> ActionResult:
        guild = self._guild(conversation)
        if guild is None:
            return self._no_guild(Action.BAN)
        user = discord.Object(int(user_id))

        def op() -> Awaitable[None]:
            return guild.ban(user, reason=reason or None, delete_message_seconds=0)

        return await self._call(conversation, Action.BAN, op, key=f"guild:{guild.id}")

    async def unban(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        guild = self._guild(conversation)
        if guild is None:
            return self._no_guild(Action.UNBAN)
        user = discord.Object(int(user_id))

        def op() -> Awaitable[None]:
            return guild.unban(user, reason=reason or None)

        return await self._call(conversation, Action.UNBAN, op, key=f"guild:{guild.id}")
