"""Done when (per-scope safety, issue 16): ``chorus run`` as a real process against the loopback
Discord gateway and the Anthropic SDK on its loopback model, with a ``chorus.toml`` giving one
channel of a guild a stricter block list and another a per-user quota.

- the same message is refused in the strict channel (no model call) and answered in the other;
- in the quota channel a user's third message gets one notice, the fourth nothing, while another
  user is still answered there (the limit is per user; the scope's, not the deployment's).
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

import prompts
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import (
    BOT_ID,
    CHANNEL_ID,
    GUILD_ID,
    DiscordServer,
    bot_mention,
    load_fixture,
    plain_message,
)
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_scopes_e2e import OTHER_ID, _guild

WORD = "zorblax"
CONFIG = f"""
[memory]
insights_enabled = false

[[scope]]
match = "discord:{GUILD_ID}/{CHANNEL_ID}"
[scope.safety]
words = ["{WORD}"]

[[scope]]
match = "discord:{GUILD_ID}/{OTHER_ID}"
[scope.quota]
user_messages_hour = 2
exempt_moderators = false
"""


def _author(user_id: int, name: str) -> dict[str, Any]:
    author = dict(load_fixture("discord_message_create_reply")["d"]["author"])
    return author | {"id": str(user_id), "username": name, "global_name": name}


async def test_a_stricter_channel_blocks_what_another_answers_and_a_scope_quota_holds(
    tmp_path: Path,
) -> None:
    (tmp_path / "chorus.toml").write_text(CONFIG)
    async with AnthropicServer() as model, DiscordServer() as discord:
        model.default_reply = lambda body: "an answer from the model"
        discord.guilds = [_guild()]
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "DISCORD_TOKEN": "loopback-token-not-secret",
            "DISCORD_API_BASE_URL": discord.api_url,
            "DISCORD_GATEWAY_URL": discord.ws_url,
            "PYTHONPATH": str(ROOT),
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        ids = iter(range(7000, 8000))
        posted = {CHANNEL_ID: 0, OTHER_ID: 0}

        async def say(channel: int, text: str, author: dict[str, Any] | None = None) -> None:
            message = plain_message(
                next(ids),
                f"<@{BOT_ID}> {text}",
                channel_id=channel,
                mentions=[bot_mention()],
                author=author,
            )
            await discord.dispatch("MESSAGE_CREATE", message)

        async def answered(channel: int) -> str:
            posted[channel] += 1
            await discord.wait_request("POST", f"/channels/{channel}/messages", posted[channel])
            return str(discord.channel_messages(channel)[-1]["content"])

        try:
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=90)
            said = f"what does {WORD} mean?"
            await say(CHANNEL_ID, said)
            refused = await answered(CHANNEL_ID)
            calls_after_refusal = len(model.requests)
            await say(OTHER_ID, said)
            in_other = await answered(OTHER_ID)

            # the quota channel: 2 messages an hour for each user
            await say(OTHER_ID, "second")
            second = await answered(OTHER_ID)
            await say(OTHER_ID, "third")
            notice = await answered(OTHER_ID)
            calls_at_limit = len(model.requests)
            await say(OTHER_ID, "fourth: over the limit, after the notice")
            await say(OTHER_ID, "from someone else", author=_author(4242, "Bea"))
            someone_else = await answered(OTHER_ID)
            # the strict channel has no quota: the same user is still answered there
            await say(CHANNEL_ID, "and here?")
            strict_again = await answered(CHANNEL_ID)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()[-3000:]

    assert refused == prompts.render("safety/refusal") and calls_after_refusal == 0
    assert in_other == second == someone_else == strict_again == "an answer from the model"
    limit = prompts.render("safety/limit_messages_hour", count=2)
    assert notice.startswith(prompts.load("safety/quota_user").split("{{")[0] + limit)
    assert calls_at_limit == 2  # the third message never reached the model
    assert len(model.requests) == 4  # the fourth did not either; Bea's and the strict one did
    others = [m["content"] for m in discord.channel_messages(OTHER_ID)]
    assert others.count(notice) == 1 and len(others) == 4  # the fourth got no reply at all
    assert WORD not in err.decode()  # never logged (the audit keeps the rule, not the text)
