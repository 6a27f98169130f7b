"""YouTube moderation actions through the Live Streaming API (``ModerationActions``).

- delete a message: ``liveChatMessages.delete`` (``id``);
- timeout: ``liveChatBans.insert`` with ``type: temporary`` and ``banDurationSeconds``; ban:
  the same with ``type: permanent``; untimeout and unban: ``liveChatBans.delete`` with the id
  the insert returned. YouTube lifts a ban only by that id, so the ids of the bans this process
  placed are kept (the latest ``_KNOWN_BANS``); a ban placed elsewhere is lifted in YouTube
  Studio.

Each call goes through ``YouTubeAPI._call`` (the adapter's one chokepoint: OAuth, retries) and
is charged to the day's quota ledger before it is made, from the reply budget like a message
sent (``YOUTUBE_COST_MODERATION`` units each; Google publishes no per-method cost for live chat
writes, 50 is its rule for a write): a moderation action never eats what reading the chat needs.

Only the chat's owner or one of its moderators may do any of this. Google cannot be asked
beforehand (``liveChatModerators.list`` is the owner's), so its 403 ``forbidden`` tells: that
chat is remembered (``PermissionGaps``), logged once with where to make the bot's channel a
moderator, and not asked again.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from cachetools import FIFOCache

from adapters.youtube.api import (
    ChatUnavailable,
    QuotaExceeded,
    ReplyBudgetSpent,
    YouTubeAPI,
    YouTubeError,
)
from bot.events import ConversationKey
from bot.platform.moderation import Action, ActionResult, Capabilities, Outcome, PermissionGaps

log = logging.getLogger("chorus.youtube.moderation")

PLATFORM = "youtube"
MAX_TIMEOUT = 1_209_600  # Chorus's cap (two weeks, as on Twitch); YouTube documents none
MODERATOR = "moderator"
_KNOWN_BANS = 10_000
SCOPE = "youtube.force-ssl"
SCOPE_HELP = (
    "the bot's YouTube token may not moderate (Google answered 403); sign the bot's channel in "
    "again with the https://www.googleapis.com/auth/youtube.force-ssl scope and set the new "
    "YOUTUBE_REFRESH_TOKEN (docs/platforms/youtube.md)"
)
GRANT_HELP = (
    "the bot's YouTube channel is not a moderator of this live chat; the channel owner adds it "
    "in YouTube Studio -> Settings -> Community -> Moderators (or types /mod in the chat)"
)


class YouTubeModeration:
    """``ModerationActions`` over the adapter's ``YouTubeAPI``."""

    platform = PLATFORM

    def __init__(self, api: YouTubeAPI) -> None:
        self.api = api
        self.gaps = PermissionGaps(PLATFORM)
        # (live chat id, channel id) -> (ban id, temporary)
        self.bans: FIFOCache[tuple[str, str], tuple[str, bool]] = FIFOCache(_KNOWN_BANS)

    def capabilities(self) -> Capabilities:
        return Capabilities(PLATFORM, frozenset(Action), max_timeout_seconds=MAX_TIMEOUT)

    async def _call(
        self, action: Action, chat: str, op: Callable[[], Awaitable[Any]]
    ) -> tuple[ActionResult, Any]:
        for needed in (SCOPE, MODERATOR):
            known = self.gaps.known(chat, needed, action)
            if known is not None:
                return known, None
        try:
            answer = await op()
        except ChatUnavailable as exc:
            if exc.reason == "forbidden":
                return self.gaps.missing(chat, MODERATOR, action, GRANT_HELP), None
            return ActionResult(
                action, Outcome.FAILED, f"the chat is unavailable ({exc.reason})"
            ), None
        except ReplyBudgetSpent:
            detail = "the reply budget is spent (the rest of the quota is kept for reading)"
            return ActionResult(action, Outcome.FAILED, detail), None
        except QuotaExceeded:
            return ActionResult(action, Outcome.FAILED, "today's YouTube quota is spent"), None
        except YouTubeError as exc:
            if exc.status == 403:  # e.g. insufficientPermissions: the token's scope
                return self.gaps.missing(chat, SCOPE, action, SCOPE_HELP), None
            if exc.status == 404:
                return ActionResult(action, Outcome.NOT_FOUND, str(exc)), None
            log.warning(
                "youtube moderation action failed",
                extra={"action": str(action), "status": exc.status, "reason": exc.reason},
            )
            return ActionResult(action, Outcome.FAILED, str(exc)), None
        self.gaps.granted(chat, MODERATOR)
        return ActionResult(action, Outcome.DONE), answer

    async def delete_message(
        self, conversation: ConversationKey, message_id: str, *, reason: str = ""
    ) -> ActionResult:
        result, _ = await self._call(
            Action.DELETE, conversation.channel, lambda: self.api.delete_message(message_id)
        )
        return result

    async def timeout(
        self, conversation: ConversationKey, user_id: str, seconds: int, reason: str
    ) -> ActionResult:
        if not 1 <= seconds <= MAX_TIMEOUT:
            detail = f"a YouTube timeout here lasts 1 to {MAX_TIMEOUT} seconds, not {seconds}"
            return ActionResult(Action.TIMEOUT, Outcome.FAILED, detail)
        return await self._ban(Action.TIMEOUT, conversation.channel, user_id, seconds)

    async def ban(self, conversation: ConversationKey, user_id: str, reason: str) -> ActionResult:
        return await self._ban(Action.BAN, conversation.channel, user_id, None)

    async def _ban(
        self, action: Action, chat: str, user_id: str, seconds: int | None
    ) -> ActionResult:
        result, ban = await self._call(
            action, chat, lambda: self.api.insert_ban(chat, user_id, seconds)
        )
        if not result.ok:
            return result
        ban_id = str((ban or {}).get("id") or "")
        if ban_id:
            self.bans[chat, user_id] = (ban_id, seconds is not None)
        return ActionResult(action, Outcome.DONE, ref=ban_id)

    async def untimeout(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        return await self._lift(Action.UNTIMEOUT, conversation.channel, user_id)

    async def unban(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        return await self._lift(Action.UNBAN, conversation.channel, user_id)

    async def _lift(self, action: Action, chat: str, user_id: str) -> ActionResult:
        known = self.bans.get((chat, user_id))
        if known is None:
            detail = (
                "no ban of this chatter placed by this process is known (YouTube lifts a ban "
                "only by its id; lift it in YouTube Studio)"
            )
            return ActionResult(action, Outcome.NOT_FOUND, detail)
        ban_id, _temporary = known
        result, _ = await self._call(action, chat, lambda: self.api.delete_ban(ban_id))
        if result.ok or result.outcome is Outcome.NOT_FOUND:
            self.bans.pop((chat, user_id), None)
        return result
