"""The quote book (examples/plugins/chorus_quotes), pip-installed offline into a directory of its
own and loaded by its entry point, in ``chorus run`` on Discord (loopback gateway) over a real
Redis: its ``[plugins.quotes]`` settings from ``chorus.toml``, a quote one user adds that another
user reads, still there after a restart, and gone with its author's ``/forget`` while the other
user's quote stays."""

from __future__ import annotations

import asyncio
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot.events import ConversationKey
from bot.state import connect, keys
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    DiscordServer,
    bot_mention,
    load_fixture,
    plain_message,
)
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_forget_streams_e2e import person

EXAMPLE = ROOT / "examples" / "plugins" / "chorus_quotes"
POSTS = f"/channels/{CHANNEL_ID}/messages"
NICK = load_fixture("discord_message_create_reply")["d"]["member"]["nick"]  # the server's name
CONFIG = """
[plugins]
modules = ["quotes"]

[plugins.quotes]
max_length = 40
show_author = true
"""


@pytest.fixture(scope="module")
def quotes_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``pip install`` of the example into a directory of its own (offline, from a copy)."""
    base = tmp_path_factory.mktemp("quotes")
    source, site = base / "src", base / "site"
    shutil.copytree(EXAMPLE, source)
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index"]
        + ["--no-build-isolation", "--disable-pip-version-check", "--target", str(site)]
        + [str(source)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (points,) = site.glob("chorus_plugin_quotes-*.dist-info/entry_points.txt")
    assert "[chorus.plugins]\nquotes = chorus_quotes" in points.read_text()
    return site


@pytest.fixture(params=["single", pytest.param("cluster", id="cluster")])
def store_url(request: pytest.FixtureRequest) -> Iterator[str]:
    """The real Redis server, and a Redis Cluster of three primaries (``tests/redis_cluster.py``:
    there a quote and its author's set of what they own hash to different slots). The test
    process builds the cluster's keys in its layout meanwhile."""
    if request.param == "cluster":
        yield request.getfixturevalue("redis_cluster_url")
        keys.use_cluster_layout(False)
        return
    yield request.getfixturevalue("real_redis_url")


async def remove_keys(url: str, users: list[int], first_message: int, count: int) -> None:
    """What the runs left in the shared test database (on a cluster: every primary scanned,
    the keys deleted slot by slot, as redis-py's cluster client does)."""
    redis = await connect.open_redis(url)
    try:
        doomed = [k async for k in redis.scan_iter(match="chorus:v1:plugin:quotes:chan:discord:*")]
        for user in users:
            doomed += [k async for k in redis.scan_iter(match=f"chorus:v1:user:discord:{user}:*")]
        doomed += [keys.dedupe("discord", str(first_message + n)) for n in range(count)]
        doomed.append(keys.history(ConversationKey(platform="discord", channel=str(CHANNEL_ID))))
        await redis.delete(*doomed)
    finally:
        await redis.aclose()


async def test_a_quote_one_user_adds_another_reads_across_a_restart_until_forget(
    tmp_path: Path, quotes_site: Path, store_url: str, key_tag: str
) -> None:
    real_redis_url = store_url  # one server, then a cluster
    base = int(key_tag[1:], 16)  # ids unique to this run
    ada, bob = base + 1, base + 2
    (tmp_path / "chorus.toml").write_text(CONFIG)
    said = 0
    async with AnthropicServer() as model, DiscordServer() as discord:
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "PYTHONPATH": f"{ROOT}{':'}{quotes_site}",
        }

        async def say(user: int, name: str, text: str) -> str:
            nonlocal said
            said += 1
            payload = plain_message(
                base + 100 + said,
                f"<@{BOT_ID}> {text}",
                author=person(user, name),
                mentions=[bot_mention()],
            )
            await discord.dispatch("MESSAGE_CREATE", payload)
            await discord.wait_for(lambda: len(discord.requests_to("POST", POSTS)) >= said, 90)
            return str(discord.requests_to("POST", POSTS)[said - 1].body["content"])

        async def run(lines: list[tuple[int, str, str]]) -> tuple[list[str], str]:
            identified = len(discord.ops(2))
            proc = await spawn_chorus(["run"], env, tmp_path)
            answers = []
            try:
                await discord.wait_for(lambda: len(discord.ops(2)) > identified, limit=90)
                for user, name, text in lines:
                    answers.append(await say(user, name, text))
            finally:
                proc.send_signal(signal.SIGTERM)
                _, err = await asyncio.wait_for(proc.communicate(), 60)
            assert proc.returncode == 0, err.decode()[-3000:]
            return answers, err.decode()

        try:
            first, err = await run(
                [
                    (ada, "ada", "/quote add Brevity is the soul of wit."),
                    (bob, "bob", "/quote"),
                    (bob, "bob", "/quote add " + "x" * 41),
                    (bob, "bob", "/quote add Less is more."),
                ]
            )
            second, _ = await run(
                [
                    (bob, "bob", "/quote 1"),
                    (ada, "ada", "/forget"),
                    (bob, "bob", "/quote count"),
                    (bob, "bob", "/quote 1"),
                ]
            )
        finally:
            await remove_keys(real_redis_url, [ada, bob], base + 100, said + 1)
    assert first == [
        "Added quote #1.",
        f'#1: "Brevity is the soul of wit." (added by {NICK})',
        "That quote is too long (41 characters; at most 40).",  # [plugins.quotes] max_length
        "Added quote #2.",
    ]
    assert "plugin loaded" in err and "plugin=quotes" in err
    assert second[0] == first[1]  # after a restart
    assert second[1].startswith("Done"), second[1]
    assert second[2:] == ["1 quote here.", f'#1: "Less is more." (added by {NICK})']
    assert not model.requests  # commands only: the model was never asked
