"""Channel-point redemptions: the broadcaster's token, its EventSub socket, the subscriptions.

Twitch sends ``channel.channel_points_custom_reward_redemption.add`` (version 1, condition
``broadcaster_user_id``) only to a subscription made with the *broadcaster's* user token carrying
``channel:read:redemptions`` (or ``channel:manage:redemptions``); the bot's token cannot. On the
websocket transport a session belongs to the user whose token made its subscriptions, so the
broadcaster's subscription goes on an EventSub websocket of its own, opened and authorised by
that token: twitchio keeps its sockets per token user, and ``ChorusTwitchClient.
subscribe_websocket(token_for=broadcaster)`` opens a ``HandoverWebsocket`` for it (the same
lossless reconnects and de-duplication as the bot's).

The pair comes from the store the bot's lives in (``tokens.broadcaster_store``), written there
by ``chorus auth twitch --broadcaster``. twitchio manages it like the bot's (it validates it
hourly and refreshes it on a 401), and every refresh is written back (``persist``). The bot's
own channel needs no second token: when the bot's token carries the scope it subscribes with it.

A channel without a usable pair (none stored, refused by Twitch, another user's, short of the
scope) is left without redemptions, and the adapter says so once, naming the channels and the
command to run; chat goes on as before. ``TWITCH_REDEMPTIONS=false`` turns all of it off.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from twitchio.eventsub import ChannelPointsRedeemAddSubscription

from adapters.twitch.client import ChorusTwitchClient, TwitchAPIError, api
from adapters.twitch.tokens import StoredTokens, TokenStore
from bot.ops.logs import add_secrets

log = logging.getLogger("chorus.twitch")

SCOPES = frozenset({"channel:read:redemptions", "channel:manage:redemptions"})
COMMAND = "chorus auth twitch --broadcaster"
SUBSCRIPTION = ChannelPointsRedeemAddSubscription.type


class Redemptions:
    """The redemption subscriptions of the channels whose broadcaster authorised them."""

    def __init__(
        self,
        client: ChorusTwitchClient,
        store_for: Callable[[str], TokenStore],
        *,
        bot_id: str,
        bot_scopes: frozenset[str],
    ) -> None:
        self.client = client
        self.store_for = store_for  # broadcaster id -> where its pair is kept
        self.bot_id = bot_id
        self.bot_scopes = bot_scopes
        self.pairs: dict[str, StoredTokens] = {}  # broadcaster id -> its current pair
        self.subscribed: set[str] = set()  # broadcaster ids with a redemption subscription
        self.missing: dict[str, str] = {}  # channel name -> why it has none

    async def start(self, channels: dict[str, str]) -> None:
        """Subscribe in every channel that can; one log line for those that cannot."""
        for channel, name in channels.items():
            why = await self._subscribe(channel)
            if why:
                self.missing[name] = why
        if self.missing:
            log.info(
                f"twitch channel-point redemptions are off in {', '.join(sorted(self.missing))}: "
                f"the broadcaster has to sign in once with `{COMMAND}` (scope "
                "channel:read:redemptions); chat goes on without them",
                extra={"channels": dict(sorted(self.missing.items())), "command": COMMAND},
            )
        if self.subscribed:
            log.info(
                "twitch channel-point redemptions on",
                extra={"channels": sorted(channels.get(c, c) for c in self.subscribed)},
            )

    async def _subscribe(self, channel: str) -> str:
        """Subscribe to ``channel``'s redemptions; why not, or "" when subscribed."""
        if channel == self.bot_id:
            if not self.bot_scopes & SCOPES:
                return "the bot's token lacks channel:read:redemptions"
        else:
            why = await self._add_token(channel)
            if why:
                return why
        payload = ChannelPointsRedeemAddSubscription(broadcaster_user_id=channel)
        try:
            await api(self.client.subscribe_websocket(payload, token_for=channel))
        except TwitchAPIError as exc:
            return f"Twitch refused the subscription (HTTP {exc.status})"
        self.subscribed.add(channel)
        return ""

    async def _add_token(self, channel: str) -> str:
        store = self.store_for(channel)
        pair = await store.load()
        if pair is None:
            return "no broadcaster token"
        add_secrets((pair.access_token, pair.refresh_token))
        try:
            valid = await api(self.client.add_token(pair.access_token, pair.refresh_token))
        except TwitchAPIError as exc:
            return f"Twitch refused the broadcaster's token (HTTP {exc.status})"
        if valid.user_id != channel:
            if valid.user_id and valid.user_id != self.bot_id:  # never drop the bot's own
                await self.client.remove_token(valid.user_id)
            return "the stored token is another user's"
        if not set(valid.scopes) & SCOPES:
            await self.client.remove_token(channel)
            return "the broadcaster's token lacks channel:read:redemptions"
        self.pairs[channel] = pair
        await self._save(channel, force=pair.user_id != channel)
        return ""

    async def persist(self, payload: Any) -> None:
        """twitchio refreshed a token: store it if it is a broadcaster's."""
        user_id = getattr(payload, "user_id", None)
        if isinstance(user_id, str) and user_id in self.pairs:
            await self._save(user_id)

    async def _save(self, channel: str, *, force: bool = False) -> None:
        pair = self.pairs[channel]
        current = self.client.tokens.get(channel)
        if current is not None and current["token"] != pair.access_token:
            pair = pair.model_copy(
                update={"access_token": current["token"], "refresh_token": current["refresh"]}
            )
            add_secrets((pair.access_token, pair.refresh_token))
        elif not force:
            return
        pair = pair.model_copy(update={"user_id": channel})
        try:
            await self.store_for(channel).save(pair)
        except Exception:
            log.exception("storing the broadcaster's refreshed twitch tokens failed")
            return
        self.pairs[channel] = pair
        log.info("twitch broadcaster tokens stored", extra={"user_id": channel})
