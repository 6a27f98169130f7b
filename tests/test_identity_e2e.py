"""One person across platforms, as an operator runs it: ``chorus run`` as a real process with
Slack (HTTP Events API) and Discord, each against its loopback, the Anthropic SDK against its
loopback, memory in a real Redis.

Ada tells Chorus a fact on Slack (``/remember``), asks for a link code on Discord (``/link``),
types it on Slack and confirms (``/link confirm``): the two accounts are one person. The pin
learnt on Slack then reaches the prompt of her Discord question (the request the loopback model
receives). Then she adds two pins, lists them (``/pins``) and deletes the second (``/forget
2``): exactly that entry is gone from Redis and from the next prompt, the others stay.

Mallory posts a code "for the giveaway": Vic, who types it, is asked whether to link with
Mallory's Discord account, and nothing is merged -- Mallory's ``/pins`` shows none of Vic's
notes, and nobody else's ``/link confirm`` links them. Once Vic does confirm, ``/unlink`` gives
each side back only what came from it, and Mallory's ``/forget`` while linked takes only her
part: Vic's notes and lines stay.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from bot.events import ConversationKey
from bot.memory.buffers import decode
from bot.memory.people import normal_code
from bot.state import connect, keys
from bot.state.history import HistoryEntry
from tests.discord_rig import discord_env, slash_interaction
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    guild_create,
    plain_message,
)
from tests.loopback.slack_server import BOT_USER_ID, SlackServer
from tests.redis_server import free_port
from tests.slack_rig import BOT_TOKEN, SECRET, fixture, post_signed
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus

LIMIT = 90.0  # generous: a loaded 2-core machine; every wait ends as soon as its event happens
POSTS = f"/channels/{CHANNEL_ID}/messages"
_PINS = re.compile(r"<pins[^>]*>(.*?)</pins>", re.DOTALL)


class Ada:
    """A person on Discord and maybe Slack. Every id contains ``base`` (unique to this run: the
    real Redis outlives it), so ``_clean`` finds every key the run left."""

    def __init__(
        self, discord: DiscordServer, base: int, slack: SlackServer | None = None, events: str = ""
    ) -> None:
        self.discord, self.slack, self.events, self.base = discord, slack, events, base
        self.discord_id = f"{base}1"
        self.slack_id = f"W{base}"
        self.n = 0

    def message_id(self, n: int) -> str:
        return f"{self.base}{100 + n}"

    async def on_discord(self, text: str) -> str:
        """Say ``text`` in the channel; the answer (the post replying to it)."""
        self.n += 1
        message_id = self.message_id(self.n)
        author = {"username": "ada", "discriminator": "0", "id": self.discord_id, "avatar": None}
        payload = plain_message(
            int(message_id), f"<@{BOT_ID}> {text}", author=author, mentions=[bot_mention()]
        )
        await self.discord.dispatch("MESSAGE_CREATE", payload)

        def answers() -> list[str]:
            return [
                str(r.body.get("content"))
                for r in self.discord.requests_to("POST", POSTS)
                if str((r.body.get("message_reference") or {}).get("message_id")) == message_id
            ]

        await self.discord.wait_for(lambda: bool(answers()), limit=LIMIT)
        return answers()[0]

    async def link_code(self) -> str:
        """``/chorus link`` as a Discord slash command: the code comes back ephemerally (a code
        is never posted in public chat). The follow-up webhook's token is unique to the call."""
        self.n += 1
        token = f"link-{self.base}-{self.n}"
        interaction = slash_interaction(self.message_id(self.n), "link", user_id=self.discord_id)
        await self.discord.dispatch("INTERACTION_CREATE", {**interaction, "token": token})
        (followup,) = await self.discord.wait_request("POST", f"/webhooks/{BOT_ID}/{token}")
        assert followup.body["flags"] & 64, "ephemeral"
        offer = str(followup.body["content"])
        (code,) = {w for w in re.split(r"[\s.:]+", offer) if normal_code(w) == w}
        return code

    async def on_slack(self, text: str) -> str:
        assert self.slack is not None
        slack = self.slack
        self.n += 1
        body = fixture("slack_app_mention_bolt_test")
        ts = f"{self.base}.{self.n:06d}"
        body["event_id"] = f"Ev{self.base}x{self.n}"
        body["event"].update(
            text=f"<@{BOT_USER_ID}> {text}",
            user=self.slack_id,
            ts=ts,
            event_ts=ts,
            client_msg_id=ts,
        )
        before = len(slack.posts)
        status, _ = await post_signed(self.events, json.dumps(body).encode())
        assert status == 200
        await slack.wait_for(lambda: len(slack.posts) > before, limit=LIMIT)
        return str(slack.posts[before]["text"])


def _prompt_pins(model: AnthropicServer) -> str:
    """The ``<pins>`` of the context block in the model's latest request ("" if none)."""
    last = model.requests[-1].body["messages"][-1]["content"]
    text = last if isinstance(last, str) else " ".join(b.get("text", "") for b in last)
    found = _PINS.search(text)
    return found.group(1) if found else ""


async def _stored_pins(url: str, platform: str, user_id: str) -> list[str]:
    redis = await connect.open_redis(url)
    try:
        person = await redis.get(keys.person_of(platform, user_id))
        assert person, "linked"
        raw = await redis.get(keys.person_memory(str(person)))
        assert isinstance(raw, str)
        return [p.text for p in decode(raw, platform=platform, user_id=user_id).pins]
    finally:
        await redis.aclose()


@pytest.fixture(params=["single", pytest.param("cluster", id="cluster")])
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The real Redis server, and a Redis Cluster of three primaries (``tests/redis_cluster.py``:
    there an identity's keys and its person's hash to different slots). The test process reads
    the cluster's keys in its layout meanwhile."""
    if request.param == "cluster":
        yield request.getfixturevalue("redis_cluster_url")
        keys.use_cluster_layout(False)
        return
    yield request.getfixturevalue("real_redis_url")


async def _clean(url: str, base: int) -> None:
    """Remove every key of this run: its ids all contain ``base``; a person's id is found from
    its aliases. (The cluster is the session's own: it goes with its keys at the end.)"""
    if "+cluster://" in url:
        return
    redis = await connect.open_redis(url)
    try:
        found = {k async for k in redis.scan_iter(match=f"*{base}*")}
        aliases = [k for k in found if k.endswith(":person")]
        persons = {str(p) for p in await redis.mget(aliases) if p} if aliases else set()
        doomed = found | {k for p in persons async for k in redis.scan_iter(match=f"*{p}*")}
        doomed.add(keys.history(ConversationKey(platform="discord", channel=str(CHANNEL_ID))))
        if doomed:
            await redis.delete(*doomed)
    finally:
        await redis.aclose()


async def test_a_linked_users_pin_reaches_the_other_platform_and_forget_2_deletes_one(
    tmp_path: Path, store_url: str, key_tag: str
) -> None:
    real_redis_url = store_url  # one server, then a cluster
    base = int(key_tag[1:], 16) % 10**12
    bees = f"I keep bees {key_tag}"
    slack_port = free_port()
    async with (
        AnthropicServer() as model,
        DiscordServer() as discord,
        SlackServer(bot_token=BOT_TOKEN) as slack,
    ):
        discord.guilds = [guild_create()]
        model.default_reply = lambda body: "an answer"
        env = _env(tmp_path, model, discord, slack, slack_port, real_redis_url)
        proc = await spawn_chorus(["run"], env, tmp_path)
        ada = Ada(discord, base, slack, f"http://127.0.0.1:{slack_port}/slack/events")
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=LIMIT)  # IDENTIFY
            await _until_slack_listens(ada)
            assert "remember" in await ada.on_slack(f"/remember {bees}")
            refused = await ada.on_discord("/link")
            assert "don't post link codes here" in refused, refused  # a public channel
            code = await ada.link_code()
            asked = await ada.on_slack(f"/link {code}")
            assert asked.startswith("This links you with Discord account"), asked
            linked = await ada.on_slack("/link confirm")
            assert linked.startswith("Linked with your Discord account"), linked

            await ada.on_discord(f"what do you know about my bees {key_tag}?")
            assert bees in _prompt_pins(model), "the Slack pin reached the Discord prompt"

            await ada.on_discord(f"/remember I play the cello {key_tag}")
            await ada.on_discord(f"/remember I live in Oslo {key_tag}")
            listing = await ada.on_discord("/pins")
            assert f"2. I play the cello {key_tag}" in listing, listing
            gone = await ada.on_discord("/forget 2")
            assert f'deleted entry 2 ("I play the cello {key_tag}")' in gone, gone
            stored = await _stored_pins(real_redis_url, "slack", ada.slack_id)
            assert stored == [bees, f"I live in Oslo {key_tag}"]

            await ada.on_discord(f"bees, cello or Oslo {key_tag}?")
            pins = _prompt_pins(model)
            assert bees in pins and f"Oslo {key_tag}" in pins and "cello" not in pins, pins
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            await _clean(real_redis_url, base)
        assert proc.returncode == 0, err.decode()[-3000:]


async def test_a_code_posted_for_a_giveaway_merges_nothing_until_its_typer_confirms(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    base = int(key_tag[1:], 16) % 10**12
    bees, giveaways = f"I keep bees {key_tag}", f"I run giveaways {key_tag}"
    question = f"what about my bees {key_tag}?"
    slack_port = free_port()
    async with (
        AnthropicServer() as model,
        DiscordServer() as discord,
        SlackServer(bot_token=BOT_TOKEN) as slack,
    ):
        discord.guilds = [guild_create()]
        model.default_reply = lambda body: "an answer"
        env = _env(tmp_path, model, discord, slack, slack_port, real_redis_url)
        proc = await spawn_chorus(["run"], env, tmp_path)
        events = f"http://127.0.0.1:{slack_port}/slack/events"
        mallory = Ada(discord, base)
        vic, eve = Ada(discord, base, slack, events), Ada(discord, base, slack, events)
        mallory.discord_id, mallory.n = f"{base}5", 100  # each their own ids and message ids
        vic.slack_id, vic.n = f"W{base}9", 200
        eve.slack_id, eve.n = f"W{base}8", 300
        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=LIMIT)  # IDENTIFY
            await _until_slack_listens(vic)
            assert "remember" in await vic.on_slack(f"/remember {bees}")
            await vic.on_slack(question)
            assert "remember" in await mallory.on_discord(f"/remember {giveaways}")
            code = await mallory.link_code()  # posted "for the giveaway"
            asked = await vic.on_slack(f"/link {code}")
            assert asked.startswith("This links you with Discord account "), asked
            assert "/link confirm within 2 minutes" in asked, asked
            assert bees not in await mallory.on_discord("/pins"), "nothing merged"
            nobody = await eve.on_slack("/link confirm")
            assert nobody.startswith("Nothing here waits for /link confirm"), nobody
            assert not await _person(real_redis_url, "slack", vic.slack_id)

            assert (await vic.on_slack("/link confirm")).startswith("Linked with your Discord")
            assert bees in await mallory.on_discord("/pins"), "shared once Vic confirmed"
            assert (await vic.on_slack("/unlink")).startswith("Unlinked from your Discord")
            assert bees not in await mallory.on_discord("/pins"), "Vic's notes went with Vic"
            mine = await vic.on_slack("/pins")
            assert bees in mine and giveaways not in mine, mine

            await vic.on_slack(f"/link {await mallory.link_code()}")
            assert (await vic.on_slack("/link confirm")).startswith("Linked")
            forgot = await mallory.on_discord("/forget")
            assert "no longer linked with your Slack account" in forgot, forgot
            mine = await vic.on_slack("/pins")
            assert bees in mine and giveaways not in mine, "Mallory's /forget took only hers"
            assert question in await _lines_of(real_redis_url, "slack", vic.slack_id)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            await _clean(real_redis_url, base)
        assert proc.returncode == 0, err.decode()[-3000:]


def _env(
    tmp_path: Path,
    model: AnthropicServer,
    discord: DiscordServer,
    slack: SlackServer,
    slack_port: int,
    redis_url: str,
) -> dict[str, str]:
    return base_env(tmp_path) | {
        "CHORUS_MODEL": "anthropic:claude-test",
        "ANTHROPIC_API_KEY": "k",
        "ANTHROPIC_BASE_URL": model.base_url,
        "CHORUS_REDIS_URL": redis_url,
        "CHORUS_INSIGHTS_ENABLED": "false",
        **discord_env(discord),
        "SLACK_BOT_TOKEN": BOT_TOKEN,
        "SLACK_SIGNING_SECRET": SECRET,
        "SLACK_API_BASE_URL": slack.api_url,
        "SLACK_HTTP_HOST": "127.0.0.1",
        "SLACK_HTTP_PORT": str(slack_port),
        "PYTHONPATH": str(ROOT),
    }


async def _person(url: str, platform: str, user_id: str) -> str | None:
    redis = await connect.open_redis(url)
    try:
        return cast("str | None", await redis.get(keys.person_of(platform, user_id)))
    finally:
        await redis.aclose()


async def _lines_of(url: str, platform: str, user_id: str) -> list[str]:
    """Every line of the user's that the history holds, in the conversations they spoke in."""
    redis = await connect.open_redis(url)
    try:
        convs = await redis.zrange(keys.user_conversations(platform, user_id), 0, -1)
        found = []
        for conv in convs:
            raw = await redis.lrange(keys.history(ConversationKey.parse(str(conv))), 0, -1)
            found += [HistoryEntry.model_validate_json(r) for r in raw]
        return [e.text for e in found if e.author_id == user_id]
    finally:
        await redis.aclose()


async def _until_slack_listens(ada: Ada) -> None:
    """Until the Slack HTTP endpoint accepts connections (an unsigned ping is refused: 401)."""
    async with asyncio.timeout(LIMIT):
        while True:
            try:
                status, _ = await post_signed(ada.events, b"{}", secret=None)
                if status in (200, 401, 403):
                    return
            except OSError:
                pass
            await asyncio.sleep(0.2)
