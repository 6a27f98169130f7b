"""Twitch moderation actions through Helix, as the bot's own account (``ModerationActions``).

- delete a message: ``DELETE /moderation/chat`` (``broadcaster_id``, ``moderator_id``,
  ``message_id``), scope ``moderator:manage:chat_messages``;
- timeout and ban: ``POST /moderation/bans`` with ``{"data": {"user_id", "duration",
  "reason"}}`` (no ``duration``: a ban; 1 to 1,209,600 seconds: a timeout); untimeout and unban:
  ``DELETE /moderation/bans`` (it lifts either); scope ``moderator:manage:banned_users``.

All through twitchio's public ``PartialUser`` methods (``delete_chat_messages``,
``timeout_user``, ``ban_user``, ``unban_user``) with the bot's user token.

The permission is checked first: the token's scopes (read when the token was validated) are
compared with what the action needs, and Helix's own answer tells the rest (401 "Missing
scope", 403: the bot is not one of the channel's moderators). A missing one is logged once per
channel, naming what to grant and where (``PermissionGaps``), and not asked about again.

Every call waits for the adapter's Redis-shared limiter (its own bucket, so moderation never
eats the chat's send budget; Helix allows 800 points a minute per token), and 429s and 5xx are
retried with backoff through ``bot.resilience``, pausing that bucket in every process.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

from adapters.twitch.client import ChorusTwitchClient, TwitchAPIError, api
from adapters.twitch.convert import BotIdentity
from bot.events import ConversationKey
from bot.platform.moderation import (
    Action,
    ActionResult,
    Capabilities,
    Outcome,
    PermissionGaps,
)
from bot.resilience import Failure, RetryPolicy, retry
from bot.state.platforms import SharedRateLimiter

log = logging.getLogger("chorus.twitch.moderation")

PLATFORM = "twitch"
SCOPE_CHAT = "moderator:manage:chat_messages"
SCOPE_BANS = "moderator:manage:banned_users"
MAX_TIMEOUT = 1_209_600  # two weeks: Helix's longest timeout
HELIX_LIMIT = 300  # moderation calls per limiter window (30 s) per bot: well within 800/min
MODERATOR = "moderator status"
TOKEN_HELP = (
    "authorise the bot account again with the {scope} scope and set the new "
    "TWITCH_ACCESS_TOKEN and TWITCH_REFRESH_TOKEN (docs/moderation-actions.md)"
)
_NEEDS = {
    Action.DELETE: SCOPE_CHAT,
    Action.TIMEOUT: SCOPE_BANS,
    Action.UNTIMEOUT: SCOPE_BANS,
    Action.BAN: SCOPE_BANS,
    Action.UNBAN: SCOPE_BANS,
}


def _classify(exc: BaseException) -> Failure:
    if isinstance(exc, TwitchAPIError):
        retryable = exc.status == 429 or exc.status >= 500
        return Failure(retryable, exc.status, reason=f"HTTP {exc.status}")
    return Failure(retryable=False)


class Host(Protocol):
    """What the moderation actions use of the Twitch adapter."""

    client: ChorusTwitchClient
    bot: BotIdentity | None
    scopes: frozenset[str]
    limiter: SharedRateLimiter
    retry: RetryPolicy
    channels: dict[str, str]

    async def persist_tokens(self, *, force: bool = False) -> None: ...


class TwitchModeration:
    """``ModerationActions`` for the Twitch adapter ``adapter`` (its client, token, limiter)."""

    platform = PLATFORM

    def __init__(self, adapter: Host) -> None:
        self.adapter = adapter
        self.gaps = PermissionGaps(PLATFORM)

    def capabilities(self) -> Capabilities:
        return Capabilities(PLATFORM, frozenset(Action), max_timeout_seconds=MAX_TIMEOUT)

    # -- the actions ---------------------------------------------------------------------------
    async def delete_message(
        self, conversation: ConversationKey, message_id: str, *, reason: str = ""
    ) -> ActionResult:
        def call(bot_id: str) -> Awaitable[None]:
            channel = self.adapter.client.create_partialuser(conversation.channel)
            return channel.delete_chat_messages(
                moderator=bot_id, message_id=message_id, token_for=bot_id
            )

        return await self._act(Action.DELETE, conversation.channel, call)

    async def timeout(
        self, conversation: ConversationKey, user_id: str, seconds: int, reason: str
    ) -> ActionResult:
        if not 1 <= seconds <= MAX_TIMEOUT:
            detail = f"a Twitch timeout lasts 1 to {MAX_TIMEOUT} seconds, not {seconds}"
            return ActionResult(Action.TIMEOUT, Outcome.FAILED, detail)

        async def call(bot_id: str) -> None:
            channel = self.adapter.client.create_partialuser(conversation.channel)
            await channel.timeout_user(
                moderator=bot_id,
                user=user_id,
                duration=seconds,
                reason=reason[:500] or None,
                token_for=bot_id,
            )

        return await self._act(Action.TIMEOUT, conversation.channel, call)

    async def untimeout(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        return await self._lift(Action.UNTIMEOUT, conversation, user_id)

    async def ban(self, conversation: ConversationKey, user_id: str, reason: str) -> ActionResult:
        async def call(bot_id: str) -> None:
            channel = self.adapter.client.create_partialuser(conversation.channel)
            await channel.ban_user(
                moderator=bot_id, user=user_id, reason=reason[:500] or None, token_for=bot_id
            )

        return await self._act(Action.BAN, conversation.channel, call)

    async def unban(
        self, conversation: ConversationKey, user_id: str, reason: str = ""
    ) -> ActionResult:
        return await self._lift(Action.UNBAN, conversation, user_id)

    async def _lift(
        self, action: Action, conversation: ConversationKey, user_id: str
    ) -> ActionResult:
        def call(bot_id: str) -> Awaitable[None]:
            channel = self.adapter.client.create_partialuser(conversation.channel)
            return channel.unban_user(moderator=bot_id, user_id=user_id, token_for=bot_id)

        return await self._act(action, conversation.channel, call)

    # -- the chokepoint --------------------------------------------------------------------------
    async def _act(
        self, action: Action, channel: str, call: Callable[[str], Awaitable[None]]
    ) -> ActionResult:
        adapter = self.adapter
        bot = adapter.bot
        if bot is None:
            return ActionResult(action, Outcome.FAILED, "the Twitch adapter is not connected")
        scope = _NEEDS[action]
        for needed in (scope, MODERATOR):
            known = self.gaps.known(channel, needed, action)
            if known is not None:
                return known
        if adapter.scopes and scope not in adapter.scopes:
            return self._missing_scope(channel, scope, action)
        bucket = f"{bot.id}:helix"

        async def attempt() -> None:
            await adapter.limiter.acquire(bucket, HELIX_LIMIT)
            try:
                await api(call(bot.id))
            finally:
                await adapter.persist_tokens()

        async def pause(delay: float) -> None:
            await adapter.limiter.pause(bucket, delay)

        try:
            await retry(
                attempt,
                _classify,
                adapter.retry,
                what=f"twitch {action}",
                sleep=pause,
                logger=log,
                message="twitch moderation call failed; retrying",
                extra={"channel": channel, "action": str(action)},
            )
        except TwitchAPIError as exc:
            return self._refused(action, channel, scope, exc)
        self.gaps.granted(channel, MODERATOR)
        return ActionResult(action, Outcome.DONE)

    def _missing_scope(self, channel: str, scope: str, action: Action) -> ActionResult:
        message = f"the bot's Twitch token lacks the {scope} scope; " + TOKEN_HELP.format(
            scope=scope
        )
        return self.gaps.missing(channel, scope, action, message)

    def _refused(
        self, action: Action, channel: str, scope: str, exc: TwitchAPIError
    ) -> ActionResult:
        text = str(exc)
        if exc.status == 401 and "scope" in text.lower():
            return self._missing_scope(channel, scope, action)
        if exc.status == 403:
            login = self.adapter.channels.get(channel, channel)
            bot = self.adapter.bot.login if self.adapter.bot is not None else "the bot"
            message = (
                f"the bot account {bot} is not a moderator of the Twitch channel {login}; the "
                f"broadcaster types /mod {bot} in their chat (or adds it in Creator Dashboard -> "
                "Community -> Roles Manager)"
            )
            return self.gaps.missing(channel, MODERATOR, action, message)
        lifting = action in (Action.UNBAN, Action.UNTIMEOUT)
        if exc.status == 404 or (exc.status == 400 and lifting and "not banned" in text):
            return ActionResult(action, Outcome.NOT_FOUND, text)
        log.warning(
            "twitch moderation action failed",
            extra={"channel": channel, "action": str(action), "status": exc.status},
        )
        return ActionResult(action, Outcome.FAILED, text)
