"""Slack installed in two workspaces, as an operator runs it: ``chorus run`` as a real process
in many-workspace mode (``SLACK_CLIENT_ID``...), state in a real Redis, bolt and slack-sdk against
the loopback Slack, the OpenAI SDK against its loopback.

A browser (aiohttp with a cookie jar) installs the app twice: ``/slack/install`` (bolt's page
and state cookie) -> the loopback consent page (``team=`` picks the workspace) -> 302 to
``/slack/oauth_redirect`` with the code and state -> bolt exchanges the code (``oauth.v2.access``)
and saves the installation through Chorus's encrypted store. A mention in each workspace is
answered in that workspace with that workspace's own token (the loopback refuses a token of
another workspace in the channel). Then workspace A uninstalls the app (``app_uninstalled``):
its tokens are deleted at once, its history and its member's keys after the grace period;
workspace B goes on answering, and a mention from A is not taken any more. Workspace B's app
rotates tokens: its first token is about to expire, so it is refreshed (``oauth.v2.access``
with the refresh token) and the new one answers. A ``[[scope]]``
matching ``slack:TEAM`` applies to that workspace's messages only.
"""

from __future__ import annotations

import asyncio
import html
import json
import re
import signal
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography.fernet import Fernet

from bot.cli import EXIT_CONFIG
from bot.state import connect, keys
from bot.state.connect import Client
from tests.loopback.openai_server import OpenAIServer
from tests.loopback.slack_server import CLIENT_ID, CLIENT_SECRET, SlackServer
from tests.redis_server import free_port
from tests.slack_rig import SECRET, fixture, post_signed
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus, stopped
from tests.waiting import until

pytestmark = pytest.mark.e2e

LIMIT = 90.0  # generous: a loaded 2-core machine; every wait ends as soon as its event happens


async def _until_listening(base: str, proc: asyncio.subprocess.Process) -> None:
    async def up() -> bool:
        assert proc.returncode is None, "chorus run exited at start"
        try:
            async with aiohttp.ClientSession() as session, session.get(f"{base}/healthz") as r:
                return r.status == 200
        except aiohttp.ClientConnectionError:
            return False

    await until(up, what="the Slack endpoint listens", limit=LIMIT)


async def _install(base: str, team: str) -> str:
    """Install the app in ``team`` as a browser does; the page the redirect ends on."""
    # Cookies of 127.0.0.1 too, and bolt's Secure state cookie over http, as browsers treat a
    # loopback origin as secure.
    jar = aiohttp.CookieJar(unsafe=True, treat_as_secure_origin=[base])
    async with aiohttp.ClientSession(cookie_jar=jar) as browser:
        async with browser.get(f"{base}/slack/install") as page:
            assert page.status == 200
            text = await page.text()
        links = {html.unescape(h) for h in re.findall(r'href="([^"]+)"', text)}
        (href,) = {link for link in links if "/oauth/v2/authorize?" in link}  # Add to Slack
        assert "state=" in href and f"client_id={CLIENT_ID}" in href, href
        async with browser.get(f"{href}&team={team}") as done:  # consent, then the redirect
            assert done.status == 200 and done.url.path == "/slack/oauth_redirect", done.url
            return await done.text()


def _mention(team: str, channel: str, user: str, bot_user: str, n: int) -> dict[str, Any]:
    body = fixture("slack_app_mention_bolt_test")
    body.pop("enterprise_id")
    ts = f"1700001000.{n:06d}"
    body.update(team_id=team, api_app_id="A0CHORUS", event_id=f"Ev{team}{n}")
    body["event"].update(
        text=f"<@{bot_user}> hello from {team}",
        user=user,
        team=team,
        channel=channel,
        ts=ts,
        event_ts=ts,
        client_msg_id=f"{team}-{n}",
    )
    return body


async def _post(events: str, body: dict[str, Any]) -> tuple[int, str]:
    return await post_signed(events, json.dumps(body).encode())


def _env(
    tmp_path: Path,
    model: OpenAIServer,
    slack: SlackServer,
    redis_url: str,
    key_tag: str,
    key: str,
    port: int,
) -> dict[str, str]:
    """``chorus run`` in many-workspace mode against the loopbacks, listening on ``port``."""
    return base_env(tmp_path) | {
        "CHORUS_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "k",
        "OPENAI_BASE_URL": model.base_url,
        "CHORUS_REDIS_URL": redis_url,
        "CHORUS_BUS_NAMESPACE": key_tag,
        "SLACK_CLIENT_ID": CLIENT_ID,
        "SLACK_CLIENT_SECRET": CLIENT_SECRET,
        "SLACK_TOKEN_ENCRYPTION_KEY": key,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_BASE_URL": slack.api_url,
        "SLACK_AUTHORIZE_URL": slack.authorize_url,
        "SLACK_REDIRECT_URI": f"http://127.0.0.1:{port}/slack/oauth_redirect",
        "SLACK_HTTP_HOST": "127.0.0.1",
        "SLACK_HTTP_PORT": str(port),
        "SLACK_UNINSTALL_GRACE_SECONDS": "3",
        "CHORUS_HEALTH_PORT": str(free_port()),
        "CHORUS_HEALTH_HOST": "127.0.0.1",
        "CHORUS_INSIGHTS_ENABLED": "false",
        "PYTHONPATH": str(ROOT),
    }


async def _keys_with(redis: Client, part: str) -> set[str]:
    return {str(k) async for k in redis.scan_iter(match=f"*{part}*")}


async def test_two_workspaces_install_answer_with_their_own_tokens_and_one_uninstalls(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    tag = key_tag.upper()  # in every id: the keys this run leaves are found and removed
    team_a, team_b = f"TA{tag}", f"TB{tag}"
    chan_a, chan_b = f"CA{tag}", f"CB{tag}"
    user_a, user_b = f"UA{tag}", f"UB{tag}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    events = f"{base}/slack/events"
    redis = await connect.open_redis(real_redis_url)
    async with OpenAIServer() as model, SlackServer() as slack:
        model.default_reply = lambda body: "an answer"
        space_a = slack.add_workspace(team_a, channels=(chan_a,))
        space_b = slack.add_workspace(team_b, channels=(chan_b,), rotating=True)
        space_b.expires_in = 60  # B's app rotates tokens: its first token is refreshed at once
        key = Fernet.generate_key().decode()
        env = _env(tmp_path, model, slack, real_redis_url, key_tag, key, port)
        (tmp_path / "chorus.toml").write_text(  # workspace B gets its own persona
            f'[personas.pirate]\nprompt = "You are Captain {tag}."\n\n'
            f'[[scope]]\nmatch = "slack:{team_b}"\npersona = "pirate"\n',
            encoding="utf-8",
        )
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await _until_listening(base, proc)

            # -- two installs through the browser flow ----------------------------------------
            for team in (team_a, team_b):
                page = await _install(base, team)
                assert "error" not in page.lower(), page[:500]
            (token_a,), (first_b,) = space_a.tokens, space_b.tokens
            for team, token in ((team_a, token_a), (team_b, first_b)):
                stored = await redis.hgetall(keys.slack_install(team))
                assert set(stored) == {"bot", "installation"}
                assert all(token not in value for value in stored.values())  # encrypted
                bot = json.loads(Fernet(key.encode()).decrypt(str(stored["bot"]).encode()))
                assert bot["bot_token"] == token  # ...under the key from the environment
            exchanges = slack.calls("/api/oauth.v2.access")
            assert [c.body.get("code") is not None for c in exchanges] == [True, True]
            assert all(c.body["redirect_uri"] == f"{base}/slack/oauth_redirect" for c in exchanges)

            # -- each workspace is answered with its own token --------------------------------
            mention_a = _mention(team_a, chan_a, user_a, space_a.bot_user_id, 1)
            mention_b = _mention(team_b, chan_b, user_b, space_b.bot_user_id, 1)
            assert (await _post(events, mention_a))[0] == 200
            assert (await _post(events, mention_b))[0] == 200
            await slack.wait_for(lambda: len(_answers(slack)) >= 2, limit=LIMIT)
            # B's token was about to expire: refreshed once (bolt, on the way in) and saved,
            # so the answer went out with the new one.
            (refresh,) = [
                c for c in slack.calls("/api/oauth.v2.access") if c.body.get("grant_type")
            ]
            assert refresh.body["grant_type"] == "refresh_token"
            first_b, token_b = space_b.tokens
            stored_b = await redis.hget(keys.slack_install(team_b), "bot")
            bot_b = json.loads(Fernet(key.encode()).decrypt(str(stored_b).encode()))
            assert bot_b["bot_token"] == token_b and token_b not in str(stored_b)
            answered = _answers(slack)
            assert answered == {chan_a: [f"Bearer {token_a}"], chan_b: [f"Bearer {token_b}"]}
            assert {p["text"] for p in slack.posts} == {"an answer"}
            assert [p["thread_ts"] for p in slack.posts if p["channel"] == chan_a] == [
                mention_a["event"]["ts"]
            ]
            # [[scope]] match = "slack:TEAM": B's turn has B's persona, A's the default one
            prompts = {
                team: [json.dumps(b) for b in model.bodies if f"hello from {team}" in json.dumps(b)]
                for team in (team_a, team_b)
            }
            assert prompts[team_a] and prompts[team_b]
            assert all(f"Captain {tag}" in p for p in prompts[team_b])
            assert not any(f"Captain {tag}" in p for p in prompts[team_a])
            # bolt authorised each request with that workspace's token (auth.test per token)
            tested = {c.headers["authorization"] for c in slack.calls("/api/auth.test")}
            assert {f"Bearer {token_a}", f"Bearer {token_b}"} <= tested
            history_a = await _keys_with(redis, f"hist:slack:{chan_a}")
            assert history_a, "workspace A's conversation has a history"

            # -- workspace A uninstalls -------------------------------------------------------
            slack.revoke_team(team_a)  # Slack revokes the tokens, then tells the app
            uninstall = {
                "token": "verification_token",
                "team_id": team_a,
                "api_app_id": "A0CHORUS",
                "event": {"type": "app_uninstalled", "event_ts": "1700002000.000001"},
                "type": "event_callback",
                "event_id": f"EvUninstall{tag}",
                "event_time": 1700002000,
            }
            assert (await _post(events, uninstall))[0] == 200

            async def tokens_gone() -> bool:
                return not await redis.exists(keys.slack_install(team_a))

            await until(tokens_gone, what="workspace A's tokens are deleted", limit=LIMIT)
            assert await redis.exists(keys.slack_install(team_b))

            left: set[str] = set()

            async def data_gone() -> bool:
                left.clear()
                for part in (chan_a, user_a, f"team:{team_a}"):
                    left.update(await _keys_with(redis, part))
                # What expires by itself: de-duplication markers (ids, no text), and /forget's
                # tombstone of when the member's data went.
                left.difference_update(
                    {k for k in left if k.startswith("chorus:v1:dedupe:") or k.endswith(":forgot")}
                )
                return not left

            await until(
                data_gone, what=lambda: f"workspace A's data is deleted; left: {left}", limit=LIMIT
            )
            assert await _keys_with(redis, f"hist:slack:{chan_b}"), "B's history is kept"

            # -- B goes on; A's next mention is not taken --------------------------------------
            status, text = await _post(events, _mention(team_a, chan_a, user_a, "UX", 2))
            assert status == 200 and "reinstall" in text.lower(), (status, text)  # bolt's answer
            assert (await _post(events, _mention(team_b, chan_b, user_b, space_b.bot_user_id, 2)))[
                0
            ] == 200
            await slack.wait_for(lambda: len(_answers(slack).get(chan_b, [])) >= 2, limit=LIMIT)
            assert _answers(slack) == {
                chan_a: [f"Bearer {token_a}"],
                chan_b: [f"Bearer {token_b}"] * 2,
            }
            # auth.test once per token: the install's check, then bolt's first authorisation
            # with it (cached after); B's first token was refreshed before any event used it.
            tests = Counter(c.headers["authorization"] for c in slack.calls("/api/auth.test"))
            assert tests == {
                f"Bearer {token_a}": 2,
                f"Bearer {first_b}": 1,
                f"Bearer {token_b}": 1,
            }, tests
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err_bytes = await stopped(proc)
            await _clean(redis, tag, (chan_a, chan_b))
            await _clean(redis, key_tag, ())
            await redis.aclose()
    err = err_bytes.decode()
    assert proc.returncode == 0, err[-3000:]
    assert token_a not in err and token_b not in err and first_b not in err  # never logged


def _org_wide(body: dict[str, Any], enterprise: str, bot_user: str) -> dict[str, Any]:
    """An event of a workspace of an org where the app is installed org-wide, as Slack sends
    it: the workspace's ``team_id``, the org's ``enterprise_id``, and an authorisation of the
    org (``is_enterprise_install``, no team)."""
    authorization = {
        "enterprise_id": enterprise,
        "team_id": None,
        "user_id": bot_user,
        "is_bot": True,
        "is_enterprise_install": True,
    }
    return body | {
        "enterprise_id": enterprise,
        "is_enterprise_install": True,
        "authorizations": [authorization],
    }


async def test_an_org_wide_install_answers_every_workspace_of_the_org_with_the_org_token(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    """Enterprise Grid: the app installed once for the org (``oauth.v2.access`` with
    ``is_enterprise_install``, an enterprise and no team) answers mentions from two workspaces
    of the org, each reply with the org's token (the loopback refuses a token of no workspace of
    the channel's org); a ``[[scope]]`` of one workspace applies to it only; ``app_uninstalled``
    of the org deletes the org's tokens and, after the grace period, what its workspaces left."""
    tag = key_tag.upper()
    org, team_1, team_2 = f"EO{tag}", f"T1{tag}", f"T2{tag}"
    chan_1, chan_2 = f"C1{tag}", f"C2{tag}"
    user_1, user_2 = f"U1{tag}", f"U2{tag}"
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    events = f"{base}/slack/events"
    redis = await connect.open_redis(real_redis_url)
    async with OpenAIServer() as model, SlackServer() as slack:
        model.default_reply = lambda body: "an org answer"
        grid = slack.add_org(org, {team_1: (chan_1,), team_2: (chan_2,)})
        key = Fernet.generate_key().decode()
        (tmp_path / "chorus.toml").write_text(  # workspace 2 of the org gets its own persona
            f'[personas.pirate]\nprompt = "You are Captain {tag}."\n\n'
            f'[[scope]]\nmatch = "slack:{team_2}"\npersona = "pirate"\n',
            encoding="utf-8",
        )
        env = _env(tmp_path, model, slack, real_redis_url, key_tag, key, port)
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await _until_listening(base, proc)
            page = await _install(base, org)  # an org admin installs it org-wide
            assert "error" not in page.lower(), page[:500]
            (token,) = grid.tokens
            assert not await redis.exists(keys.slack_install(team_1))
            stored = await redis.hgetall(keys.slack_install(f"org-{org}"))
            assert set(stored) == {"bot", "installation"}
            bot = json.loads(Fernet(key.encode()).decrypt(str(stored["bot"]).encode()))
            assert bot["bot_token"] == token and bot["is_enterprise_install"] is True
            assert bot["enterprise_id"] == org and bot["team_id"] is None

            # -- a mention from each of two workspaces of the org ---------------------------
            for team, chan, user in ((team_1, chan_1, user_1), (team_2, chan_2, user_2)):
                body = _org_wide(_mention(team, chan, user, grid.bot_user_id, 1), org, "UB")
                assert (await _post(events, body))[0] == 200
            await slack.wait_for(lambda: len(_answers(slack)) >= 2, limit=LIMIT)
            assert _answers(slack) == {chan_1: [f"Bearer {token}"], chan_2: [f"Bearer {token}"]}
            assert {p["text"] for p in slack.posts} == {"an org answer"}
            prompts = {
                team: [json.dumps(b) for b in model.bodies if f"hello from {team}" in json.dumps(b)]
                for team in (team_1, team_2)
            }
            assert prompts[team_1] and prompts[team_2]
            assert all(f"Captain {tag}" in p for p in prompts[team_2])
            assert not any(f"Captain {tag}" in p for p in prompts[team_1])
            assert await _keys_with(redis, f"hist:slack:{chan_1}")

            # -- the org uninstalls the app -----------------------------------------------------
            slack.revoke_team(org)
            uninstall = {
                "token": "verification_token",
                "team_id": team_1,
                "api_app_id": "A0CHORUS",
                "event": {"type": "app_uninstalled", "event_ts": "1700002000.000001"},
                "type": "event_callback",
                "event_id": f"EvUninstall{tag}",
                "event_time": 1700002000,
            }
            assert (await _post(events, _org_wide(uninstall, org, "UB")))[0] == 200

            async def tokens_gone() -> bool:
                return not await redis.exists(keys.slack_install(f"org-{org}"))

            await until(tokens_gone, what="the org's tokens are deleted", limit=LIMIT)
            left: set[str] = set()

            async def data_gone() -> bool:
                left.clear()
                for part in (chan_1, chan_2, user_1, user_2, f"team:org-{org}"):
                    left.update(await _keys_with(redis, part))
                left.difference_update(
                    {k for k in left if k.startswith("chorus:v1:dedupe:") or k.endswith(":forgot")}
                )
                return not left

            await until(
                data_gone,
                what=lambda: f"the org's workspaces' data is deleted; left: {left}",
                limit=LIMIT,
            )
            again = _org_wide(_mention(team_1, chan_1, user_1, "UX", 2), org, "UB")
            status, text = await _post(events, again)
            assert status == 200 and "reinstall" in text.lower(), (status, text)
            assert len(slack.posts) == 2
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err_bytes = await stopped(proc)
            await _clean(redis, tag, (chan_1, chan_2))
            await _clean(redis, key_tag, ())
            await redis.zrem(keys.slack_uninstalled(), f"org-{org}")
            await redis.aclose()
    err = err_bytes.decode()
    assert proc.returncode == 0, err[-3000:]
    assert token not in err


def _answers(slack: SlackServer) -> dict[str, list[str]]:
    """channel -> the Authorization header of each successful post into it."""
    found: dict[str, list[str]] = {}
    for call in slack.calls("/api/chat.postMessage"):
        found.setdefault(str(call.body.get("channel")), []).append(call.headers["authorization"])
    return found


async def _clean(redis: Client, tag: str, channels: tuple[str, ...]) -> None:
    doomed = await _keys_with(redis, tag)
    if doomed:
        await redis.delete(*doomed)
    if channels:
        await redis.hdel(keys.slack_channel_teams(), *channels)
    await redis.zrem(keys.slack_uninstalled(), f"TA{tag}", f"TB{tag}")


@pytest.mark.parametrize("key", ["", "not-a-fernet-key"])
async def test_a_missing_or_malformed_encryption_key_stops_the_start_naming_it(
    tmp_path: Path, key: str
) -> None:
    env = base_env(tmp_path) | {
        "CHORUS_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "k",
        "SLACK_CLIENT_ID": CLIENT_ID,
        "SLACK_CLIENT_SECRET": CLIENT_SECRET,
        "SLACK_TOKEN_ENCRYPTION_KEY": key,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_HTTP_HOST": "127.0.0.1",
        "SLACK_HTTP_PORT": str(free_port()),
    }
    proc = await spawn_chorus(["run"], env, tmp_path)
    _, err = await stopped(proc, limit=LIMIT)
    text = err.decode()
    assert proc.returncode == EXIT_CONFIG, text[-2000:]
    assert "SLACK_TOKEN_ENCRYPTION_KEY" in text and "Traceback" not in text, text[-2000:]
    assert ("is not set" if not key else "is not a Fernet key") in text, text[-2000:]
