"""Slack in many workspaces, without a process: the installation store's contract (the
embedded store and a real Redis, through slack-sdk's own ``AsyncInstallationStore`` calls),
tokens encrypted at rest, the OAuth state store, token rotation against the loopback
``oauth.v2.access``, and the deletion of an uninstalled workspace's data.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from cryptography.fernet import Fernet
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.listener.async_builtins import AsyncTokenRevocationListeners
from slack_sdk.oauth.installation_store.models.installation import Installation

from adapters.slack.installations import (
    EncryptedInstallations,
    StoreStates,
    cipher,
    install_key,
    lookup,
)
from adapters.slack.workspaces import NotInstalled, Workspaces
from bot.events import ConversationKey
from bot.settings import ConfigError, SlackSettings
from bot.state import keys
from bot.state.connect import Client
from bot.state.slack_teams import SlackTeams
from tests.loopback.slack_server import CLIENT_ID, CLIENT_SECRET, SlackServer
from tests.redis_cluster import WITH_CLUSTER, store_url

pytestmark = pytest.mark.redis

KEY = Fernet.generate_key().decode()


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


def installation(team: str, token: str, **more: object) -> Installation:
    values: dict[str, object] = {
        "app_id": "A0CHORUS",
        "team_id": team,
        "team_name": "Team",
        "bot_token": token,
        "bot_id": "B1",
        "bot_user_id": "UBOT1",
        "bot_scopes": "chat:write,app_mentions:read",
        "user_id": "UINSTALLER",
        "user_token": "xoxp-installer-secret",
        "installed_at": time.time(),
        **more,
    }
    return Installation(**values)  # type: ignore[arg-type]


@pytest.fixture
def store(redis_client: Client) -> EncryptedInstallations:
    return EncryptedInstallations(SlackTeams(redis_client), cipher([KEY]))


async def test_saved_installation_is_found_as_installation_and_bot(
    store: EncryptedInstallations, key_tag: str
) -> None:
    team = f"T{key_tag}"
    await store.async_save(installation(team, "xoxb-first-secret"))
    found = await store.async_find_installation(enterprise_id=None, team_id=team)
    bot = await store.async_find_bot(enterprise_id=None, team_id=team)
    assert found is not None and bot is not None
    assert (found.bot_token, found.user_token, found.bot_user_id) == (
        "xoxb-first-secret",
        "xoxp-installer-secret",
        "UBOT1",
    )
    assert (bot.bot_token, bot.bot_id, bot.bot_user_id, bot.team_id) == (
        "xoxb-first-secret",
        "B1",
        "UBOT1",
        team,
    )
    # Only the latest installer's installation is kept: another user's is not there.
    assert (
        await store.async_find_installation(enterprise_id=None, team_id=team, user_id="UOTHER")
        is None
    )
    assert await store.async_find_bot(enterprise_id=None, team_id=f"{team}X") is None
    # A reinstall replaces the token.
    await store.async_save(installation(team, "xoxb-second-secret"))
    bot = await store.async_find_bot(enterprise_id=None, team_id=team)
    assert bot is not None and bot.bot_token == "xoxb-second-secret"


async def test_tokens_are_encrypted_at_rest(
    store: EncryptedInstallations, redis_client: Client, key_tag: str
) -> None:
    team = f"T{key_tag}"
    await store.async_save(installation(team, "xoxb-plain-secret-token"))
    raw = await SlackTeams(redis_client).raw(team)
    assert set(raw) == {"bot", "installation"}
    for value in raw.values():
        assert "xoxb-plain-secret-token" not in value
        assert "xoxp-installer-secret" not in value
        assert "UBOT1" not in value  # the whole record is sealed, not just the token
        assert Fernet(KEY.encode()).decrypt(value.encode())  # Fernet, under our key


async def test_a_wrong_key_finds_nothing_and_says_so(
    store: EncryptedInstallations,
    redis_client: Client,
    key_tag: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    team = f"T{key_tag}"
    await store.async_save(installation(team, "xoxb-secret"))
    other = EncryptedInstallations(
        SlackTeams(redis_client), cipher([Fernet.generate_key().decode()])
    )
    with caplog.at_level(logging.ERROR):
        assert await other.async_find_bot(enterprise_id=None, team_id=team) is None
    assert "SLACK_TOKEN_ENCRYPTION_KEY" in caplog.text and "xoxb-secret" not in caplog.text
    # Key rotation: a new key first, the old one after it, still reads (and writes anew).
    rotated = EncryptedInstallations(
        SlackTeams(redis_client), cipher([Fernet.generate_key().decode(), KEY])
    )
    bot = await rotated.async_find_bot(enterprise_id=None, team_id=team)
    assert bot is not None and bot.bot_token == "xoxb-secret"


async def test_an_org_wide_installation_is_found_for_every_workspace_of_the_org_and_revoked(
    store: EncryptedInstallations, redis_client: Client, key_tag: str
) -> None:
    """Enterprise Grid: one record for the org, found as bolt's authorisation asks for it (the
    enterprise id with the event's workspace and ``is_enterprise_install``) for any workspace of
    the org, and by ``lookup`` of its store name (replies); not as a workspace install; bolt's
    ``tokens_revoked`` listener with the org's context (no team) deletes it."""
    org = f"E{key_tag}"
    org_wide = installation(
        None,  # type: ignore[arg-type]
        "xoxb-org-secret",
        enterprise_id=org,
        enterprise_name="Org",
        is_enterprise_install=True,
    )
    await store.async_save(org_wide)
    assert set(await SlackTeams(redis_client).raw(f"org-{org}")) == {"bot", "installation"}
    assert install_key(None, org, True) == install_key("T1", org, True) == f"org-{org}"
    for team in ("T1", "T2"):
        bot = await store.async_find_bot(
            enterprise_id=org, team_id=team, is_enterprise_install=True
        )
        assert bot is not None and bot.bot_token == "xoxb-org-secret"
        assert await store.async_find_bot(enterprise_id=org, team_id=team) is None
    found = await store.async_find_bot(**lookup(f"org-{org}"))
    assert found is not None and found.bot_token == "xoxb-org-secret"
    assert lookup("T1") == {"enterprise_id": None, "team_id": "T1", "is_enterprise_install": False}
    context = AsyncBoltContext({"enterprise_id": org, "is_enterprise_install": True})
    event = {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": ["UBOT1"]}}
    await AsyncTokenRevocationListeners(store).handle_tokens_revoked_events(event, context)
    assert await store.async_find_bot(**lookup(f"org-{org}")) is None
    assert await SlackTeams(redis_client).raw(f"org-{org}") == {}


async def test_tokens_revoked_through_bolts_listener(
    store: EncryptedInstallations, redis_client: Client, key_tag: str
) -> None:
    team = f"T{key_tag}"
    listeners = AsyncTokenRevocationListeners(store)
    context = AsyncBoltContext({"team_id": team})
    await store.async_save(installation(team, "xoxb-secret"))
    # Another user's token, then the installer's user token: only the user token goes.
    for user in ("UOTHER", "UINSTALLER"):
        event = {"type": "tokens_revoked", "tokens": {"oauth": [user], "bot": []}}
        await listeners.handle_tokens_revoked_events(event, context)
    found = await store.async_find_installation(enterprise_id=None, team_id=team)
    assert found is not None and found.user_token is None and found.bot_token == "xoxb-secret"
    bot = await store.async_find_bot(enterprise_id=None, team_id=team)
    assert bot is not None and bot.bot_token == "xoxb-secret"
    # The bot token: nothing that holds it is left.
    event = {"type": "tokens_revoked", "tokens": {"oauth": [], "bot": ["UBOT1"]}}
    await listeners.handle_tokens_revoked_events(event, context)
    assert await store.async_find_bot(enterprise_id=None, team_id=team) is None
    assert await store.async_find_installation(enterprise_id=None, team_id=team) is None
    # app_uninstalled: everything.
    await store.async_save(installation(team, "xoxb-secret"))
    await listeners.handle_app_uninstalled_events(context)
    assert await SlackTeams(redis_client).raw(team) == {}


async def test_deleting_bot_installation_and_all(
    store: EncryptedInstallations, redis_client: Client, key_tag: str
) -> None:
    team = f"T{key_tag}"
    await store.async_save(installation(team, "xoxb-secret"))
    await store.async_delete_installation(enterprise_id=None, team_id=team, user_id="UOTHER")
    assert await store.async_find_installation(enterprise_id=None, team_id=team) is not None
    await store.async_delete_installation(enterprise_id=None, team_id=team)
    assert await store.async_find_installation(enterprise_id=None, team_id=team) is None
    assert await store.async_find_bot(enterprise_id=None, team_id=team) is not None
    await store.async_delete_bot(enterprise_id=None, team_id=team)
    assert await store.async_find_bot(enterprise_id=None, team_id=team) is None
    await store.async_save(installation(team, "xoxb-secret"))
    await store.async_delete_all(enterprise_id=None, team_id=team)
    assert await store.async_find_bot(enterprise_id=None, team_id=team) is None
    assert await store.async_find_installation(enterprise_id=None, team_id=team) is None
    assert await SlackTeams(redis_client).raw(team) == {}


async def test_an_org_wide_installation_is_kept_under_the_org(
    store: EncryptedInstallations, key_tag: str
) -> None:
    org = f"E{key_tag}"
    await store.async_save(
        installation("", "xoxb-org", team_id=None, enterprise_id=org, is_enterprise_install=True)
    )
    bot = await store.async_find_bot(enterprise_id=org, team_id="TANY", is_enterprise_install=True)
    assert bot is not None and bot.bot_token == "xoxb-org"


async def test_oauth_state_works_once(redis_client: Client) -> None:
    states = StoreStates(SlackTeams(redis_client), expiration_seconds=60)
    state = await states.async_issue()
    assert len(state) >= 32
    assert await states.async_consume(state) is True
    assert await states.async_consume(state) is False
    assert await states.async_consume("never-issued") is False
    assert await states.async_consume("") is False
    await redis_client.delete(keys.slack_oauth_state(state))


def test_a_missing_or_bad_key_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="SLACK_TOKEN_ENCRYPTION_KEY is not set"):
        cipher([])
    with pytest.raises(ConfigError, match="SLACK_TOKEN_ENCRYPTION_KEY: key 2 is not a Fernet"):
        cipher([KEY, "not-a-key"])
    settings = SlackSettings(  # type: ignore[call-arg]
        SLACK_CLIENT_ID=CLIENT_ID, SLACK_CLIENT_SECRET=CLIENT_SECRET, SLACK_SIGNING_SECRET="s"
    )
    with pytest.raises(ConfigError, match="SLACK_TOKEN_ENCRYPTION_KEY is not set"):
        settings.check()
    both = SlackSettings(  # type: ignore[call-arg]
        SLACK_CLIENT_ID=CLIENT_ID, SLACK_BOT_TOKEN="xoxb-1", SLACK_SIGNING_SECRET="s"
    )
    with pytest.raises(ConfigError, match="both set"):
        both.check()
    socket = SlackSettings(  # type: ignore[call-arg]
        SLACK_CLIENT_ID=CLIENT_ID,
        SLACK_CLIENT_SECRET=CLIENT_SECRET,
        SLACK_TOKEN_ENCRYPTION_KEY=KEY,
        SLACK_APP_TOKEN="xapp-1",
    )
    with pytest.raises(ConfigError, match="SLACK_SIGNING_SECRET"):
        socket.check()
    assert socket.configured and socket.multi_workspace
    assert not SlackSettings().configured  # single-workspace stays the default


# -- token rotation -----------------------------------------------------------------------------
@pytest.fixture
async def slack() -> AsyncIterator[SlackServer]:
    async with SlackServer() as server:
        yield server


def _settings(slack: SlackServer) -> SlackSettings:
    return SlackSettings(  # type: ignore[call-arg]
        SLACK_CLIENT_ID=CLIENT_ID,
        SLACK_CLIENT_SECRET=CLIENT_SECRET,
        SLACK_TOKEN_ENCRYPTION_KEY=KEY,
        SLACK_SIGNING_SECRET="s",
        SLACK_API_BASE_URL=slack.api_url,
        SLACK_UNINSTALL_GRACE_SECONDS=60,
    )


async def test_an_expiring_token_is_rotated_before_use_and_saved_encrypted(
    store: EncryptedInstallations, redis_client: Client, slack: SlackServer, key_tag: str
) -> None:
    team = f"T{key_tag}"
    space = slack.add_workspace(team, rotating=True)
    issued = slack.issue(space)  # what oauth.v2.access answered at install
    await store.async_save(
        installation(
            team,
            issued["access_token"],
            bot_refresh_token=issued["refresh_token"],
            bot_token_expires_in=60,  # inside the 120 minutes: due for a refresh
        )
    )
    spaces = Workspaces(_settings(slack), SlackTeams(redis_client), store)
    try:
        token = await spaces.token(team)
        assert token != issued["access_token"] and slack.token_team(token) == team
        (call,) = slack.calls("/api/oauth.v2.access")
        assert call.body["grant_type"] == "refresh_token"
        assert call.body["refresh_token"] == issued["refresh_token"]
        bot = await store.async_find_bot(enterprise_id=None, team_id=team)
        assert bot is not None and bot.bot_token == token
        assert bot.bot_refresh_token != issued["refresh_token"]
        assert (
            bot.bot_token_expires_at is not None and bot.bot_token_expires_at > time.time() + 3600
        )
        raw = await SlackTeams(redis_client).raw(team)
        assert all(token not in value for value in raw.values())
        # Fresh now: the next use does not refresh again, and the sender carries the new token.
        sender = await spaces.sender_for_team(team)
        assert sender.client.token == token
        assert len(slack.calls("/api/oauth.v2.access")) == 1
        # A refresh token Slack refuses leaves the workspace unusable, said plainly.
        await store.async_save_bot(
            bot.__class__(
                **{
                    **vars(bot),
                    "bot_token_expires_at": int(time.time()),
                    "bot_refresh_token": "xoxe-bad",
                }
            )
        )
        with pytest.raises(NotInstalled, match="could not be refreshed"):
            await spaces.token(team)
    finally:
        await spaces.aclose()


# -- uninstalling -------------------------------------------------------------------------------
async def test_an_uninstalled_workspaces_data_goes_after_the_grace_and_only_its_own(
    store: EncryptedInstallations, redis_client: Client, slack: SlackServer, key_tag: str
) -> None:
    gone, kept = f"T{key_tag}A", f"T{key_tag}B"
    now = [1000.0]
    teams = SlackTeams(redis_client)
    spaces = Workspaces(_settings(slack), teams, store, clock=lambda: now[0])
    convs = {
        team: ConversationKey(platform="slack", channel=f"C{team}", thread="1.2")
        for team in (gone, kept)
    }
    users = {gone: f"U{key_tag}A", kept: f"U{key_tag}B"}
    for team in (gone, kept):
        await store.async_save(installation(team, f"xoxb-{team}"))
        await spaces.learn(team, convs[team], users[team])
        await redis_client.rpush(keys.history(convs[team]), '{"role": "user", "text": "hi"}')
        await redis_client.set(keys.memory("slack", users[team]), "{}")
        await redis_client.zadd(
            keys.user_conversations("slack", users[team]), {str(convs[team]): 1}
        )
    assert await spaces.team_of(f"C{gone}") == gone
    await store.async_delete_all(enterprise_id=None, team_id=gone)  # bolt's listener
    await spaces.uninstalled(gone)
    assert await spaces.purge_due() == []  # within the grace period nothing goes
    assert await redis_client.exists(keys.history(convs[gone]))
    now[0] += 61
    assert await spaces.purge_due() == [gone]
    assert not await redis_client.exists(
        keys.history(convs[gone]),
        keys.memory("slack", users[gone]),
        keys.user_conversations("slack", users[gone]),
        keys.slack_team_seen(gone, "convs"),
        keys.slack_team_seen(gone, "users"),
    )
    assert await teams.team_of(f"C{gone}") is None
    assert (
        await redis_client.exists(keys.history(convs[kept]), keys.memory("slack", users[kept])) == 2
    )
    assert await teams.team_of(f"C{kept}") == kept
    with pytest.raises(NotInstalled):
        await spaces.sender_for_channel(f"C{gone}")
    assert (await spaces.sender_for_channel(f"C{kept}")).client.token == f"xoxb-{kept}"
    await redis_client.hdel(keys.slack_channel_teams(), f"C{kept}")
    await spaces.aclose()


async def test_a_reinstall_within_the_grace_keeps_the_data(
    store: EncryptedInstallations, redis_client: Client, slack: SlackServer, key_tag: str
) -> None:
    team = f"T{key_tag}"
    now = [1000.0]
    spaces = Workspaces(_settings(slack), SlackTeams(redis_client), store, clock=lambda: now[0])
    conv = ConversationKey(platform="slack", channel=f"C{team}")
    await spaces.learn(team, conv, None)
    await redis_client.rpush(keys.history(conv), "{}")
    await spaces.uninstalled(team)
    await store.async_save(installation(team, "xoxb-again"))
    now[0] += 3600
    assert await spaces.purge_due() == []
    assert await redis_client.exists(keys.history(conv))
    assert team not in await SlackTeams(redis_client).pending()
    await redis_client.hdel(keys.slack_channel_teams(), f"C{team}")
    await spaces.aclose()
