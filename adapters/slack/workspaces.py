"""Slack in many workspaces: bolt's OAuth wiring, which workspace's token a call uses, and what
an uninstall ends.

``oauth_settings`` hands bolt its OAuth flow (install page, redirect, state checks, the code
exchange) over ``EncryptedInstallations`` and ``StoreStates``; ``listen`` adds bolt's own
``tokens_revoked`` and ``app_uninstalled`` listeners. Inbound, bolt authorises each request itself (``AsyncInstallationStoreAuthorize`` over
``EncryptedInstallations``, refreshing a rotating token). Outbound, a reply names only its
channel: ``Workspaces`` knows the channel's installation (learnt from the events that came in,
kept in the state store so a restart or another process knows it too) and keeps one
``SlackSender`` per installation (Slack's rate limits are per workspace), whose client carries
that installation's bot token. An installation is a workspace's (its team id) or, for an
Enterprise Grid org-wide install, the org's (``org-{enterprise id}``, see ``install_key``): every
workspace of the org is answered with the org's token, found as bolt finds it (``find_bot`` by
the enterprise id, no team, ``is_enterprise_install``). Before
each use the bot is read from the installation store and, when the app has token rotation on and
the token is within ``SLACK_TOKEN_ROTATION_MINUTES`` of expiring, refreshed with slack-sdk's
``AsyncTokenRotator`` and saved (the same calls bolt makes inbound).

``uninstalled`` runs on ``app_uninstalled`` (after bolt's own listener deleted the tokens; an
org-wide one's event has no team in its authorisation, so bolt deletes the org's): the
installation's sender goes and its data is scheduled for deletion ``SLACK_UNINSTALL_GRACE_SECONDS``
later; ``purge_due`` (called by the adapter's housekeeping loop) deletes what is due through
``SlackTeams.purge``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import cast

from cachetools import LRUCache, TTLCache
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncInstallationStoreAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.listener.async_builtins import AsyncTokenRevocationListeners
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_sdk.errors import SlackTokenRotationError
from slack_sdk.oauth.token_rotation.async_rotator import AsyncTokenRotator
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.installations import (
    ORG_PREFIX,
    EncryptedInstallations,
    StoreStates,
    cipher,
    install_key,
    lookup,
)
from adapters.slack.sender import SlackSender
from bot.events import ConversationKey
from bot.settings import SlackSettings
from bot.state.connect import Client
from bot.state.slack_teams import SlackTeams

log = logging.getLogger("chorus.slack.workspaces")

PURGE_INTERVAL = 60.0  # seconds between two looks for uninstalled workspaces' data to delete
AUTH_CACHE_SIZE = 10_000  # tokens whose auth.test bolt remembers (one or two per workspace)


class NotInstalled(LookupError):
    """No usable bot token for the workspace (never installed, uninstalled or revoked)."""


class Workspaces:
    """Per-installation senders and the channel -> installation map of an app installed in many
    workspaces (an installation: a team id, or ``org-{enterprise id}`` for an org-wide one)."""

    def __init__(
        self,
        settings: SlackSettings,
        teams: SlackTeams,
        installations: EncryptedInstallations,
        *,
        make_sender: Callable[[AsyncWebClient], SlackSender] = SlackSender,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.teams = teams
        self.installations = installations
        self._make_sender = make_sender
        self._clock = clock
        self.rotator = AsyncTokenRotator(
            client_id=settings.client_id.strip(),
            client_secret=settings.client_secret_value(),
            client=AsyncWebClient(base_url=settings.api_base_url, retry_handlers=[]),
        )
        self.states = StoreStates(teams)
        self._senders: dict[str, SlackSender] = {}
        self._channels: LRUCache[str, str] = LRUCache(maxsize=100_000)  # -> installation
        self._workspace: LRUCache[str, str] = LRUCache(maxsize=100_000)  # -> its team id
        self._seen: LRUCache[tuple[str, str, str], None] = LRUCache(maxsize=200_000)

    @classmethod
    def from_settings(cls, settings: SlackSettings, redis: Client) -> Workspaces:
        """Over the state store; ``ConfigError`` naming SLACK_TOKEN_ENCRYPTION_KEY if bad."""
        teams = SlackTeams(redis)
        return cls(
            settings, teams, EncryptedInstallations(teams, cipher(settings.encryption_keys()))
        )

    # -- bolt's side ----------------------------------------------------------------------------
    def oauth_settings(self) -> AsyncOAuthSettings:
        """bolt's OAuth flow over these stores (install page, redirect, authorisation)."""
        settings = self.settings
        return AsyncOAuthSettings(
            client_id=settings.client_id.strip(),
            client_secret=settings.client_secret_value(),
            scopes=settings.scope_list(),
            redirect_uri=settings.redirect_uri or None,
            authorization_url=settings.authorize_url,
            installation_store=self.installations,
            installation_store_bot_only=True,
            token_rotation_expiration_minutes=settings.token_rotation_minutes,
            state_store=self.states,
            logger=logging.getLogger("chorus.slack.oauth"),
        )

    def authorize(self, client: AsyncWebClient) -> AsyncInstallationStoreAuthorize:
        """bolt's authorisation from the installation store, with its token rotation calling
        Slack through ``client`` (SLACK_API_BASE_URL), reading only the bot (``find_bot``: one
        store read per event), and its ``auth.test`` of a token cached (bounded, an hour)
        instead of made for every event."""
        settings = self.settings
        authorize = AsyncInstallationStoreAuthorize(
            logger=logging.getLogger("chorus.slack.oauth"),
            installation_store=self.installations,
            client_id=settings.client_id.strip(),
            client_secret=settings.client_secret_value(),
            token_rotation_expiration_minutes=settings.token_rotation_minutes,
            bot_only=True,  # Chorus acts as the bot only: one store read per event
            cache_enabled=True,
            client=client,
        )
        bounded: TTLCache[str, AuthorizeResult] = TTLCache(maxsize=AUTH_CACHE_SIZE, ttl=3600)
        authorize.authorize_result_cache = cast("dict[str, AuthorizeResult]", bounded)
        return authorize

    def listen(self, app: AsyncApp) -> None:
        """``tokens_revoked``: bolt's own listener deletes the revoked tokens.
        ``app_uninstalled``: bolt's deletes every token, then ``uninstalled`` runs."""
        revoked = AsyncTokenRevocationListeners(self.installations)
        app.event("tokens_revoked")(revoked.handle_tokens_revoked_events)

        async def on_uninstalled(context: AsyncBoltContext) -> None:
            await revoked.handle_app_uninstalled_events(context)
            try:
                install = install_key(
                    context.team_id, context.enterprise_id, context.is_enterprise_install
                )
            except ValueError:
                return
            await self.uninstalled(install)

        app.event("app_uninstalled")(on_uninstalled)

    # -- learning where things belong ---------------------------------------------------------
    async def learn(
        self, install: str, conv: ConversationKey, user_id: str | None, *, team: str | None = None
    ) -> None:
        """Note that ``conv`` and ``user_id`` are the installation ``install``'s (a store write
        the first time this process sees the pair); ``team`` is the workspace the channel is in
        (of the org, for an org-wide installation), named to Slack when an answer streams."""
        self._channels[conv.channel] = install
        if team:
            self._workspace[conv.channel] = team
        seen = (install, str(conv), user_id or "")
        if seen in self._seen:
            return
        await self.teams.seen(install, conv, user_id)
        self._seen[seen] = None

    async def team_of(self, channel: str) -> str | None:
        team = self._channels.get(channel)
        if team is None:
            team = await self.teams.team_of(channel)
            if team is not None:
                self._channels[channel] = team
        return team

    # -- tokens -------------------------------------------------------------------------------
    async def sender_for_channel(self, channel: str) -> SlackSender:
        team = await self.team_of(channel)
        if team is None:
            raise NotInstalled(f"no workspace is known for channel {channel}")
        return await self.sender_for_team(team)

    def cached_sender(self, channel: str) -> tuple[SlackSender, str | None] | None:
        """The sender and workspace team of ``channel`` if this process already holds them (no
        I/O); the team is None when not known (an org-wide installation's channel)."""
        install = self._channels.get(channel)
        sender = self._senders.get(install) if install is not None else None
        if sender is None or install is None:
            return None
        team = self._workspace.get(channel) or (None if install.startswith(ORG_PREFIX) else install)
        return sender, team

    async def token(self, team_id: str) -> str:
        """The installation's bot token (``team_id``: a team id or ``org-{enterprise id}``),
        refreshed first when it rotates and is about to expire."""
        bot = await self.installations.async_find_bot(**lookup(team_id))
        if bot is None or not bot.bot_token:
            raise NotInstalled(f"slack workspace {team_id} has no bot token (not installed)")
        try:
            rotated = await self.rotator.perform_bot_token_rotation(
                bot=bot, minutes_before_expiration=self.settings.token_rotation_minutes
            )
        except SlackTokenRotationError:
            log.error("slack token rotation failed", extra={"team": team_id})
            raise NotInstalled(
                f"slack workspace {team_id}: its token could not be refreshed"
            ) from None
        if rotated is not None:
            await self.installations.async_save_bot(rotated)
            log.info("slack bot token rotated", extra={"team": team_id})
            bot = rotated
        return str(bot.bot_token)

    async def sender_for_team(self, team_id: str) -> SlackSender:
        token = await self.token(team_id)
        sender = self._senders.get(team_id)
        if sender is None:
            client = AsyncWebClient(
                token=token, base_url=self.settings.api_base_url, retry_handlers=[]
            )
            sender = self._senders[team_id] = self._make_sender(client)
        sender.client.token = token  # a rotated token replaces the old one in place
        return sender

    # -- uninstalling ---------------------------------------------------------------------------
    async def uninstalled(self, team_id: str) -> float:
        """Forget the team's sender; its data goes after the grace period (epoch returned)."""
        sender = self._senders.pop(team_id, None)
        if sender is not None:
            await sender.aclose()
        at = self._clock() + self.settings.uninstall_grace_seconds
        await self.teams.schedule_purge(team_id, at)
        log.info("slack workspace uninstalled", extra={"team": team_id, "data_deleted_at": at})
        return at

    async def purge_due(self) -> list[str]:
        """Delete the data of every uninstalled team whose grace period is over."""
        done = []
        for team in await self.teams.due(self._clock()):
            convs, users = await self.teams.purge(team)
            for channel in [c for c, t in self._channels.items() if t == team]:
                del self._channels[channel]
                self._workspace.pop(channel, None)
            for seen in [k for k in self._seen if k[0] == team]:
                del self._seen[seen]
            log.info(
                "slack workspace data deleted",
                extra={"team": team, "conversations": convs, "users": users},
            )
            done.append(team)
        return done

    async def purge_forever(self) -> None:
        """``purge_due`` every ``PURGE_INTERVAL`` (a quarter of a shorter grace period)."""
        grace = self.settings.uninstall_grace_seconds
        interval = max(0.5, min(PURGE_INTERVAL, grace / 4))
        while True:
            try:
                await self.purge_due()
            except Exception:
                log.exception("could not delete an uninstalled slack workspace's data")
            await asyncio.sleep(interval)

    async def aclose(self) -> None:
        for sender in self._senders.values():
            await sender.aclose()
        self._senders.clear()
