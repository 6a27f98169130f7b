"""What Slack installed in many workspaces keeps in the state store.

- **Installations**: per workspace (team id; ``org-{enterprise id}`` when org-wide) a hash with the ``bot`` and the
  latest ``installation``. The values arrive here already encrypted (the Slack adapter's
  installation store encrypts them); this module stores opaque strings and never sees a token.
- **OAuth states**: the one-time ``state`` of an install flow, with the flow's expiry, consumed
  atomically (``GETDEL``) so a state works once.
- **Who owns a channel**: channel id -> team id, so a reply is sent with the token of the
  workspace the channel belongs to, from any process, after a restart too.
- **What a workspace left**: the conversations and the user ids seen in it, so that its data can
  be deleted after it uninstalls the app.
- **Uninstalled workspaces**: team id -> when their data goes. ``purge`` deletes, through
  ``PeopleStore.forget`` (the ``/forget`` deletion), every seen member's memory buffer,
  conversation index, vectors, ``/pins`` view and insights jobs (leaving ``/forget``'s day-long
  tombstone), then in one transaction every seen conversation's keys (``conversation_keys``),
  the channels' moderator lists and dashboard entries, the channel ownership and the seen sets.
  Left to expire by themselves: the router's de-duplication markers (message ids, no text; 3
  days) and the tombstones. A linked person's shared buffer (``/link``) is not a workspace's:
  it stays until its own ``/forget`` or TTL.

On a Redis Cluster these keys hash to many slots, so what is one transaction on one Redis goes
in steps there: ``put`` takes the workspace off the uninstalled list first and then stores the
installation (a purge that starts after the first step leaves it alone), and ``purge`` deletes
the conversations' and channels' keys (each node its own, at once) before it takes the
workspace off the list, so a purge cut short is done again by the next one. One more round trip
each on a cluster; none on one Redis.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import cast

from bot.events import ConversationKey
from bot.state import keys
from bot.state.client import EncodableT, is_cluster
from bot.state.connect import Client
from bot.state.people import PeopleStore, forgotten

PLATFORM = "slack"
BOT, INSTALLATION = "bot", "installation"


def conversation_keys(conv: ConversationKey) -> list[str]:
    """Every key that holds what was said in one conversation: its history, the dashboard's
    turn log, its summaries and community notes, its live-chat state."""
    return [
        keys.history(conv),
        keys.turn_log(conv),
        *(keys.summary(kind, conv) for kind in keys.SUMMARY_KINDS),
        *(keys.live(kind, conv) for kind in keys.LIVE_KINDS),
    ]


class SlackTeams:
    """The Slack workspaces' keys over one store client."""

    def __init__(self, redis: Client) -> None:
        self.redis = redis

    # -- installations ------------------------------------------------------------------------
    async def put(self, team_id: str, **values: str) -> None:
        """Store ``bot`` and/or ``installation`` (already encrypted) of one workspace, and take
        it off the uninstalled list (a reinstall within the grace period keeps its data)."""
        mapping: dict[EncodableT, EncodableT] = {k: v for k, v in values.items()}
        if is_cluster(self.redis):  # two slots: off the list first (see the module docstring)
            await self.redis.zrem(keys.slack_uninstalled(), team_id)
            await self.redis.hset(keys.slack_install(team_id), mapping=mapping)
            return
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(keys.slack_install(team_id), mapping=mapping)
            pipe.zrem(keys.slack_uninstalled(), team_id)
            await pipe.execute()

    async def update(self, team_id: str, **values: str) -> None:
        """Replace values of an installation, leaving the uninstalled list alone."""
        mapping: dict[EncodableT, EncodableT] = {k: v for k, v in values.items()}
        await self.redis.hset(keys.slack_install(team_id), mapping=mapping)

    async def get(self, team_id: str, field: str) -> str | None:
        raw = await self.redis.hget(keys.slack_install(team_id), field)
        return cast("str | None", raw)

    async def drop(self, team_id: str, *fields: str) -> None:
        """Delete these values of the workspace (none given: the whole installation)."""
        key = keys.slack_install(team_id)
        if fields:
            await self.redis.hdel(key, *fields)
        else:
            await self.redis.delete(key)

    async def raw(self, team_id: str) -> dict[str, str]:
        """Everything stored for the workspace, as stored (for tests of encryption at rest)."""
        found = await self.redis.hgetall(keys.slack_install(team_id))
        return cast("dict[str, str]", found)

    # -- OAuth states -------------------------------------------------------------------------
    async def issue_state(self, state: str, seconds: int) -> None:
        await self.redis.set(keys.slack_oauth_state(state), "1", ex=seconds)

    async def consume_state(self, state: str) -> bool:
        """True once for a state issued and not expired."""
        return await self.redis.getdel(keys.slack_oauth_state(state)) is not None

    # -- channels and what a workspace left ---------------------------------------------------
    async def seen(self, team_id: str, conv: ConversationKey, user_id: str | None) -> None:
        """Remember that ``conv`` (and ``user_id``) belong to ``team_id``: one round trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(keys.slack_channel_teams(), conv.channel, team_id)
            pipe.sadd(keys.slack_team_seen(team_id, "convs"), str(conv))
            if user_id:
                pipe.sadd(keys.slack_team_seen(team_id, "users"), user_id)
            await pipe.execute()

    async def team_of(self, channel: str) -> str | None:
        return cast("str | None", await self.redis.hget(keys.slack_channel_teams(), channel))

    # -- uninstalling ---------------------------------------------------------------------------
    async def schedule_purge(self, team_id: str, at: float) -> None:
        """The workspace's data goes at epoch ``at`` (unless it installs again before)."""
        await self.redis.zadd(keys.slack_uninstalled(), {team_id: at})

    async def due(self, now: float) -> list[str]:
        """The uninstalled workspaces whose data is due for deletion."""
        raw = await self.redis.zrangebyscore(keys.slack_uninstalled(), "-inf", now)
        return [str(team) for team in raw]

    async def pending(self) -> dict[str, float]:
        """Every uninstalled workspace still waiting, with when its data goes."""
        raw = cast(
            "list[tuple[str, float]]",
            await self.redis.zrange(keys.slack_uninstalled(), 0, -1, withscores=True),
        )
        return {str(team): float(at) for team, at in raw}

    async def purge(self, team_id: str) -> tuple[int, int]:
        """Delete what the workspace left (see the module docstring); ``(conversations,
        users)`` deleted. A workspace that installed again meanwhile is left alone."""
        if await self.redis.zscore(keys.slack_uninstalled(), team_id) is None:
            return 0, 0
        convs_key = keys.slack_team_seen(team_id, "convs")
        users_key = keys.slack_team_seen(team_id, "users")
        convs = sorted(str(c) for c in await self.redis.smembers(convs_key))
        users = sorted(str(u) for u in await self.redis.smembers(users_key))
        now = datetime.now(UTC)
        await PeopleStore(self.redis).forget(
            (forgotten((PLATFORM, user), now) for user in users), person=None
        )
        channels = sorted({ConversationKey.parse(conv).channel for conv in convs})
        doomed = [key for conv in convs for key in conversation_keys(ConversationKey.parse(conv))]
        doomed += [keys.safety_users(PLATFORM, channel) for channel in channels]
        doomed += [convs_key, users_key]
        cluster = is_cluster(self.redis)
        async with self.redis.pipeline(transaction=not cluster) as pipe:
            for key in doomed:  # one key a DEL: a cluster's pipeline sends each to its node
                pipe.delete(key)
            if channels:
                pipe.zrem(keys.recent_conversations(PLATFORM), *convs)
                pipe.hdel(keys.slack_channel_teams(), *channels)
            if not cluster:
                pipe.zrem(keys.slack_uninstalled(), team_id)
            await pipe.execute()
        if cluster:  # last, once everything else went (see the module docstring)
            await self.redis.zrem(keys.slack_uninstalled(), team_id)
        return len(convs), len(users)
