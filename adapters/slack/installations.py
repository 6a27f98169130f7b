"""bolt's installation store and OAuth state store, kept in Chorus's store, tokens encrypted.

``EncryptedInstallations`` is slack-sdk's ``AsyncInstallationStore``: bolt's OAuth flow saves an
installation through it, bolt's authorisation finds (and, with token rotation on, refreshes and
saves again) a workspace's bot through it, bolt's uninstall listeners delete through it. Each
value is the JSON slack-sdk's own file store writes (``Installation(**json)`` reads it back),
encrypted with Fernet (``cryptography``: AES-128-CBC plus an HMAC, with a timestamp) before it
reaches ``bot.state.slack_teams``. ``SLACK_TOKEN_ENCRYPTION_KEY`` may list several keys: the
first encrypts, each decrypts (``MultiFernet``), so a key is rotated by putting the new one
first. A missing or malformed key is a ``ConfigError`` naming the variable; a value that no key
decrypts is logged (without the value) and treated as no installation.

An org-wide (Enterprise Grid) installation is one record, ``org-{enterprise id}``
(``install_key``): bolt finds it for an event of any workspace of the org (its lookup is by the
enterprise id with no team when ``is_enterprise_install``), and its uninstall or revocation
(no team id in the event's authorisation) deletes it.

Only the latest installation of a workspace is kept (Chorus uses bot tokens; a user token of
the installer is kept with it but never used). ``StoreStates`` is the ``AsyncOAuthStateStore``:
a random state per ``/slack/install`` visit, valid for one redirect within its expiry.
"""

from __future__ import annotations

import json
import logging
import secrets
from typing import Any

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from bot.settings import ConfigError
from bot.state.slack_teams import BOT, INSTALLATION, SlackTeams

log = logging.getLogger("chorus.slack.installations")

KEY_VARIABLE = "SLACK_TOKEN_ENCRYPTION_KEY"
ORG_PREFIX = "org-"  # the store name of an org-wide installation: org-{enterprise id}


def cipher(keys: list[str]) -> MultiFernet:
    """The cipher of ``SLACK_TOKEN_ENCRYPTION_KEY``'s keys; ``ConfigError`` naming it if bad."""
    if not keys:
        raise ConfigError(f"{KEY_VARIABLE} is not set")
    made = []
    for number, key in enumerate(keys, start=1):
        try:
            made.append(Fernet(key.encode()))
        except (ValueError, TypeError):
            raise ConfigError(
                f"{KEY_VARIABLE}: key {number} is not a Fernet key (32 bytes in URL-safe "
                'base64, 44 characters); make one with: python -c "from cryptography.fernet '
                'import Fernet; print(Fernet.generate_key().decode())"'
            ) from None
    return MultiFernet(made)


class EncryptedInstallations(AsyncInstallationStore):
    """slack-sdk's installation store interface over ``SlackTeams``, encrypted at rest."""

    def __init__(self, teams: SlackTeams, crypto: MultiFernet) -> None:
        self.teams = teams
        self.crypto = crypto
        self._logger = log

    @property
    def logger(self) -> logging.Logger:
        return self._logger

    # -- saving -------------------------------------------------------------------------------
    async def async_save(self, installation: Installation) -> None:
        team = install_key(
            installation.team_id, installation.enterprise_id, installation.is_enterprise_install
        )
        values = {INSTALLATION: self._seal(vars(installation))}
        if installation.bot_token:
            values[BOT] = self._seal(vars(installation.to_bot()))
        await self.teams.put(team, **values)

    async def async_save_bot(self, bot: Bot) -> None:
        team = install_key(bot.team_id, bot.enterprise_id, bot.is_enterprise_install)
        await self.teams.put(team, **{BOT: self._seal(vars(bot))})

    # -- finding ------------------------------------------------------------------------------
    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        data = await self._open(enterprise_id, team_id, is_enterprise_install, BOT)
        return Bot(**data) if data is not None else None

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        data = await self._open(enterprise_id, team_id, is_enterprise_install, INSTALLATION)
        if data is None:
            return None
        found = Installation(**data)
        if user_id is not None and found.user_id != user_id:
            return None  # only the latest installer's is kept
        return found

    # -- deleting -----------------------------------------------------------------------------
    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        """The bot token is revoked: the installation (which holds a copy of it) goes too,
        since Chorus acts only as the bot."""
        await self.teams.drop(install_key(team_id, enterprise_id), BOT, INSTALLATION)

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        """``user_id`` given (a user token revoked): only that installer's user token goes;
        none: the installation record."""
        team = install_key(team_id, enterprise_id)
        if user_id is None:
            await self.teams.drop(team, INSTALLATION)
            return
        found = await self.async_find_installation(
            enterprise_id=enterprise_id, team_id=team_id, user_id=user_id
        )
        if found is None:
            return  # not the installer kept (or gone already)
        kept = {**vars(found), "user_token": None, "user_refresh_token": None}
        kept["user_token_expires_at"] = None
        await self.teams.update(team, **{INSTALLATION: self._seal(kept)})

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        await self.teams.drop(install_key(team_id, enterprise_id))

    # -- encryption ---------------------------------------------------------------------------
    def _seal(self, values: dict[str, Any]) -> str:
        return self.crypto.encrypt(json.dumps(values).encode()).decode()

    async def _open(
        self,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None,
        field: str,
    ) -> dict[str, Any] | None:
        try:
            team = install_key(team_id, enterprise_id, is_enterprise_install)
        except ValueError:
            return None
        sealed = await self.teams.get(team, field)
        if sealed is None:
            return None
        try:
            data: dict[str, Any] = json.loads(self.crypto.decrypt(sealed.encode()))
        except InvalidToken:
            log.error(
                "a slack installation could not be decrypted: was SLACK_TOKEN_ENCRYPTION_KEY "
                "changed without keeping the old key after it?",
                extra={"team": team_id, "enterprise": enterprise_id, "field": field},
            )
            return None
        return data


def install_key(
    team_id: str | None, enterprise_id: str | None, org_wide: bool | None = False
) -> str:
    """The store's name of an installation: its team id, or ``org-{enterprise id}`` for an
    org-wide (Enterprise Grid) installation, which answers for every workspace of the org.
    slack-sdk's semantics: an org-wide lookup (``is_enterprise_install``) or one without a team
    is by the enterprise id alone; a workspace-level one by the team id."""
    if enterprise_id and (org_wide or not team_id):
        return f"{ORG_PREFIX}{enterprise_id}"
    if team_id:
        return team_id
    raise ValueError("an installation without a team or enterprise id")


def lookup(install: str) -> dict[str, Any]:
    """The ``find_bot`` arguments of an installation's store name (``install_key``'s inverse):
    an org-wide one by its enterprise id with no team, as bolt's authorisation asks for it."""
    if install.startswith(ORG_PREFIX):
        enterprise = install.removeprefix(ORG_PREFIX)
        return {"enterprise_id": enterprise, "team_id": None, "is_enterprise_install": True}
    return {"enterprise_id": None, "team_id": install, "is_enterprise_install": False}


class StoreStates(AsyncOAuthStateStore):
    """slack-sdk's OAuth state store interface over ``SlackTeams``: one-time, expiring."""

    def __init__(self, teams: SlackTeams, *, expiration_seconds: int = 600) -> None:
        self.teams = teams
        self.expiration_seconds = expiration_seconds

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        state = secrets.token_urlsafe(24)
        await self.teams.issue_state(state, self.expiration_seconds)
        return state

    async def async_consume(self, state: str) -> bool:
        if not state or len(state) > 200:
            return False
        return await self.teams.consume_state(state)
