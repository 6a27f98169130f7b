"""The ``moderation`` plugin on Discord: a real ``chorus run`` with ``[plugins.moderation]``, the
real Discord adapter (discord.py) against the loopback Discord gateway and REST API, state in a
real Redis. The channel is ambient (``DISCORD_AMBIENT_CHANNELS``), so the bot reads every line
of it. A member posts a link three times: each message is deleted through ``DELETE
/channels/{channel}/messages/{message}`` with the reason in the audit-log header, the member is
warned once, and the third offence times them out through ``PATCH
/guilds/{guild}/members/{user}`` (``communication_disabled_until``)."""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.safety.audit import AuditEntry, read_audit
from bot.state import connect
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_moderation import MODERATOR_PERMISSIONS, member_payload
from tests.loopback.discord_server import CHANNEL_ID, DiscordServer, plain_message
from tests.moderation_rigs import guild_with_bot
from tests.test_chat_e2e import base_env, spawn_chorus, stopped
from tests.test_forget_streams_e2e import person
from tests.waiting import until

pytestmark = pytest.mark.e2e

LIMIT = 90.0
POSTS = f"/channels/{CHANNEL_ID}/messages"


async def test_a_link_poster_is_deleted_warned_and_timed_out_on_discord(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    base = int(key_tag[1:], 16)
    viewer = str(base + 1)
    namespace = f"dmod{key_tag[1:]}"
    (tmp_path / "chorus.toml").write_text("[plugins.moderation]\ntimeout_seconds = 900\n")
    async with AnthropicServer() as model, DiscordServer() as discord:
        discord.guilds = [guild_with_bot(MODERATOR_PERMISSIONS)]
        discord.members[viewer] = member_payload(viewer, "linky")
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS_NAMESPACE": namespace,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "DISCORD_AMBIENT_CHANNELS": str(CHANNEL_ID),
        }
        ids = [str(base + 100 + n) for n in range(3)]
        proc = await spawn_chorus(["run"], env, tmp_path)
        failure: Exception | None = None
        try:
            await discord.wait_for(lambda: len(discord.ops(2)) > 0, limit=LIMIT)
            await discord.wait_for(lambda: bool(discord.guilds), limit=LIMIT)
            for n, msg_id in enumerate(ids):
                message = plain_message(
                    int(msg_id),
                    f"join my server: discord-spam{n}.gg",
                    author=person(int(viewer), "linky"),
                )
                discord.messages[msg_id] = message
                await discord.dispatch("MESSAGE_CREATE", message)
                await discord.wait_for(lambda m=msg_id: m not in discord.messages, LIMIT)  # type: ignore[misc]
            await discord.wait_for(lambda: discord.timed_out_until(viewer) is not None, LIMIT)
            until_at = discord.timed_out_until(viewer)
            assert until_at is not None
            assert until_at <= datetime.now(UTC) + timedelta(seconds=900)
            assert until_at > datetime.now(UTC) + timedelta(seconds=600)
            deletes = [
                r for r in discord.requests if r.method == "DELETE" and "/messages/" in r.path
            ]
            assert [r.path.rsplit("/", 1)[1] for r in deletes] == ids
            assert any("offence 3" in (reason or "") for reason in discord.audit_reasons)
            posts = [str(r.body["content"]) for r in discord.requests_to("POST", POSTS)]
            assert len([p for p in posts if "please stop" in p]) == 1
            store = await connect.open_redis(real_redis_url)
            try:

                async def audited() -> list[AuditEntry]:
                    found = await read_audit(store, namespace=namespace)
                    acts = [e for e in found if e.direction == "act"]
                    return acts if len(acts) >= 4 else []

                acts = await until(audited, limit=LIMIT)
            finally:
                await store.aclose()
            assert [(e.rule, e.action) for e in acts] == [
                ("delete", "done"),
                ("delete", "done"),
                ("delete", "done"),
                ("timeout", "done"),
            ]
        except Exception as exc:
            failure = exc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
            _, err = await stopped(proc)
        if failure is not None:
            raise AssertionError(err.decode(errors="replace")[-6000:]) from failure
        assert proc.returncode == 0, err.decode(errors="replace")[-3000:]


async def test_without_manage_messages_the_gap_is_logged_once_and_discord_never_asked(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    """The bot's role has neither Manage Messages nor Moderate Members: the permission is read
    from Discord's view of the server before any call, so no moderation request reaches the
    API, and each gap is logged once however many links follow."""
    base = int(key_tag[1:], 16)
    viewer = str(base + 1)
    namespace = f"dgap{key_tag[1:]}"
    (tmp_path / "chorus.toml").write_text("[plugins.moderation]\n")
    async with AnthropicServer() as model, DiscordServer() as discord:
        discord.guilds = [guild_with_bot(0)]
        discord.bot_permissions = 0
        discord.members[viewer] = member_payload(viewer, "linky")
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_BUS_NAMESPACE": namespace,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "DISCORD_AMBIENT_CHANNELS": str(CHANNEL_ID),
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        failure: Exception | None = None
        try:
            await discord.wait_for(lambda: len(discord.ops(2)) > 0, limit=LIMIT)
            for n in range(5):
                message = plain_message(
                    base + 100 + n, f"spam{n}.gg", author=person(int(viewer), "linky")
                )
                discord.messages[str(base + 100 + n)] = message
                await discord.dispatch("MESSAGE_CREATE", message)
            store = await connect.open_redis(real_redis_url)
            try:

                async def audited() -> list[AuditEntry]:
                    found = await read_audit(store, namespace=namespace)
                    acts = [e for e in found if e.direction == "act"]
                    return acts if len(acts) >= 8 else []  # five deletions, three timeouts

                acts = await until(audited, limit=LIMIT)
            finally:
                await store.aclose()
            assert {e.action for e in acts} == {"missing_permission"}
            deletes = [
                r for r in discord.requests if r.method == "DELETE" and "/messages/" in r.path
            ]
            assert deletes == [] and discord.moderation_calls == []
        except Exception as exc:
            failure = exc
        finally:
            if proc.returncode is None:
                proc.send_signal(signal.SIGINT)
            _, err = await stopped(proc)
        text = err.decode(errors="replace")
        if failure is not None:
            raise AssertionError(text[-6000:]) from failure
        assert proc.returncode == 0, text[-3000:]
        missing = [ln for ln in text.splitlines() if "moderation permission missing" in ln]
        assert len(missing) == 2, missing  # Manage Messages once, Moderate Members once
        assert any("Manage Messages" in ln for ln in missing)
        assert any("Moderate Members" in ln for ln in missing)
