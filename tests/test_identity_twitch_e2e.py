"""A linked viewer's pin learnt on Twitch reaches their Discord prompt: ``chorus run`` as a real
process with Twitch (real twitchio 3 against the loopback EventSub websocket and Helix) and
Discord (discord.py against the loopback gateway), the Anthropic SDK against its loopback,
memory in a real Redis.

On Twitch the web chat keeps ``/`` for its own commands, so the viewer addresses the bot:
``@mybot /remember ...``, then ``@mybot /link <code>`` with the code ``/link`` gave them on
Discord, which asks them to confirm: another viewer's ``@mybot /link confirm`` links nobody,
theirs does. Their next Discord question's prompt (the request the loopback model receives)
carries the Twitch pin; another Discord member's prompt does not.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.discord_rig import discord_env
from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.discord_server import DiscordServer, guild_create
from tests.loopback.twitch_server import TwitchServer
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus
from tests.test_identity_e2e import LIMIT, Ada, _clean, _prompt_pins
from tests.test_live_pause_e2e import channel, line, subscribed
from tests.test_twitch_e2e import BOT_ID, BOT_LOGIN, CHAT
from tests.test_twitch_reconnect_e2e import twitch_env

__all__ = ["channel"]  # the fixture: a Twitch channel of this test alone, cleaned up after


async def test_a_pin_learnt_on_twitch_reaches_the_linked_discord_prompt(
    tmp_path: Path, real_redis_url: str, key_tag: str, channel: tuple[str, str]
) -> None:
    channel_id, login = channel
    base = int(key_tag[1:], 16) % 10**12
    viewer = f"{base}7"  # every id of the run contains base: tests.test_identity_e2e._clean
    bees = f"I keep bees {key_tag}"
    async with (
        AnthropicServer() as model,
        DiscordServer() as discord,
        TwitchServer() as twitch,
    ):
        discord.guilds = [guild_create()]
        model.default_reply = lambda body: "an answer"
        twitch.add_user(BOT_ID, BOT_LOGIN)
        twitch.add_user(channel_id, login)
        twitch.grant(BOT_ID, "access-0", "refresh-0")
        env = base_env(tmp_path) | twitch_env(twitch) | discord_env(discord)
        env |= {
            "TWITCH_CHANNELS": login,
            "CHORUS_REDIS_URL": real_redis_url,
            "CHORUS_INSIGHTS_ENABLED": "false",
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            # every mention answered at once (no per-user or channel cooldown to wait out)
            "CHORUS_ENGAGE_USER_COOLDOWN_SECONDS": "0",
            "CHORUS_ENGAGE_CHANNEL_COOLDOWN_SECONDS": "0",
            "PYTHONPATH": str(ROOT),
        }
        proc = await spawn_chorus(["run"], env, tmp_path)
        ada = Ada(discord, base)
        other = Ada(discord, base)
        other.discord_id, other.n = f"{base}2", 50  # another member, other message ids

        async def on_twitch(n: int, text: str, who: str = viewer) -> str:
            msg_id = f"{base}-{n}"
            event = line(channel, msg_id, text, who, mention=True)
            assert await twitch.notify(CHAT, event)

            def answers() -> list[str]:
                return [
                    str(s["message"])
                    for s in twitch.sent
                    if s.get("reply_parent_message_id") == msg_id
                ]

            await twitch.wait_until(lambda: bool(answers()), LIMIT)
            return answers()[0]

        try:
            await twitch.wait_until(lambda: subscribed(twitch) == 4, LIMIT)
            await discord.wait_for(lambda: bool(discord.ops(2)), limit=LIMIT)  # IDENTIFY
            assert "remember" in await on_twitch(1, f"/remember {bees}")
            code = await ada.link_code()
            asked = await on_twitch(2, f"/link {code}")
            assert "This links you with Discord account" in asked, asked
            nobody = await on_twitch(3, "/link confirm", who=f"{base}8")  # another viewer
            assert "Nothing here waits for /link confirm" in nobody, nobody
            linked = await on_twitch(4, "/link confirm")
            assert "Linked with your Discord account" in linked, linked

            await ada.on_discord(f"what do you know about my bees {key_tag}?")
            assert bees in _prompt_pins(model), "the Twitch pin reached the Discord prompt"
            await other.on_discord(f"what do you know about my bees {key_tag}?")
            assert bees not in _prompt_pins(model), "nobody else's prompt"
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            await _clean(real_redis_url, base)
        assert proc.returncode == 0, err.decode()[-3000:]
