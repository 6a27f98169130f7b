"""The golden cases of what ``chorus init`` and ``chorus auth`` print (``prompts/onboarding/*``),
registered as cases by ``tests/test_prompts_golden.py`` (``CASES``).

``chorus init``'s closing lines and the Discord invite come from the functions that print them
(``finish.closing``, ``discord_app.describe``); the texts printed in the middle of a sign-in flow
(the device code, the consent link, the browser's page) are rendered with the values those flows
pass, since the flows themselves need a platform to talk to (``tests/test_auth.py`` runs them).
"""

from __future__ import annotations

import sys
from pathlib import Path

from redis.asyncio import Redis

import prompts
from bot.onboarding import discord_app, finish
from bot.onboarding.discord_app import GATEWAY_MESSAGE_CONTENT, Application
from bot.settings import settings_from

HOME = Path("/home/ada/chorus")
APP = "123456789012345678"


async def onboarding(redis: Redis) -> str:
    started = sys.argv[0]
    sys.argv[0] = str(HOME / ".venv/bin/chorus")  # as `.venv/bin/chorus init` in a checkout
    try:
        return _onboarding()
    finally:
        sys.argv[0] = started


def _onboarding() -> str:
    embedded = settings_from({"CHORUS_DATA_DIR": str(HOME / ".chorus")})
    memory = settings_from(
        {"CHORUS_DATA_DIR": str(HOME / ".chorus"), "CHORUS_REDIS_URL": "memory://"}
    )
    server = settings_from(
        {"CHORUS_DATA_DIR": str(HOME / ".chorus"), "CHORUS_REDIS_URL": "redis://redis:6379/0"}
    )
    values = {"TWITCH_REFRESH_TOKEN": "", "YOUTUBE_REFRESH_TOKEN": "r", "CHORUS_ADMIN_PORT": "8470"}
    sections = [
        ("discord, intent on", discord_app.describe(Application(APP, GATEWAY_MESSAGE_CONTENT))),
        ("discord, intent off", discord_app.describe(Application(APP, 0))),
        (
            "discord, unread",
            prompts.render("onboarding/discord_unread", reason="Discord answered 401"),
        ),
        (
            "closing, memory store, from the checkout",
            finish.closing(HOME, values, ["twitch", "youtube"], memory, checked=False, cwd=HOME),
        ),
        (
            "closing, the default store",
            finish.closing(HOME, {}, ["discord"], embedded, checked=False, cwd=HOME),
        ),
        (
            "closing, Redis, elsewhere",
            finish.closing(HOME, {}, [], server, checked=False, cwd=Path("/tmp")),
        ),
        (
            "auth twitch: the code",
            prompts.render(
                "onboarding/twitch_device",
                url="https://www.twitch.tv/activate",
                code="ABCD-EFGH",
                minutes=30,
            ),
        ),
        (
            "auth twitch: done",
            prompts.render(
                "onboarding/twitch_done",
                login="adabot",
                user_id="1234",
                scopes="user:read:chat user:write:chat user:bot",
                env_file=str(HOME / ".env"),
                command="chorus",
                url="https://id.twitch.tv/oauth2/authorize?client_id=c&scope=channel%3Abot",
                redirect="http://localhost:3000",
                console="https://dev.twitch.tv/console/apps",
            ),
        ),
        (
            "auth twitch --broadcaster: the code",
            prompts.render(
                "onboarding/twitch_device_broadcaster",
                url="https://www.twitch.tv/activate",
                code="ABCD-EFGH",
                minutes=30,
            ),
        ),
        (
            "auth twitch --broadcaster: done",
            prompts.render(
                "onboarding/twitch_broadcaster_done",
                login="adastreams",
                user_id="5678",
                scopes="channel:read:redemptions",
                store="the state store (redis://localhost:6379/0)",
                command="chorus",
            ),
        ),
        (
            "auth youtube: the link",
            prompts.render(
                "onboarding/youtube_open",
                url="https://accounts.google.com/o/oauth2/v2/auth?client_id=c",
                redirect="http://127.0.0.1:8765/",
                seconds="300",
            ),
        ),
        ("auth youtube: the browser's page", prompts.load("onboarding/youtube_page")),
        ("auth youtube: a wrong answer", prompts.load("onboarding/youtube_page_wrong")),
        (
            "auth youtube: done",
            prompts.render(
                "onboarding/youtube_done",
                title="Ada's channel",
                channel_id="UC123",
                env_file=str(HOME / ".env"),
                command="chorus",
            ),
        ),
    ]
    return "\n\n".join(f"== {title}\n{text}" for title, text in sections)


CASES = {"onboarding": onboarding}
