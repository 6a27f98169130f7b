"""What ``chorus init`` tells a Discord operator after the token passed: the invite link and
whether the Message Content intent is on.

The application is read with the bot token (``GET /applications/@me``, under
``DISCORD_API_BASE_URL``): its ``id`` is the invite's ``client_id`` and its ``flags`` say whether
the privileged Message Content intent is enabled (``GATEWAY_MESSAGE_CONTENT``, or
``GATEWAY_MESSAGE_CONTENT_LIMITED`` for an unverified bot under 100 servers: both let the
gateway send message text). The invite asks for the scopes ``bot applications.commands`` (the
bot user, and its slash commands) and for exactly the permissions the Discord adapter uses:
it reads channels, sends messages (in threads too), replies to a message (a reply needs the
message history) and edits or deletes only its own messages, which needs no permission.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

import prompts
from bot.onboarding.checks import DISCORD_API, TIMEOUT, request
from bot.settings import Settings

AUTHORIZE_URL = "https://discord.com/oauth2/authorize"
SCOPES = "bot applications.commands"
# (name as the Developer Portal shows it, bit) -- https://discord.com/developers/docs/topics/permissions
PERMISSIONS = (
    ("View Channels", 1 << 10),
    ("Send Messages", 1 << 11),
    ("Read Message History", 1 << 16),
    ("Send Messages in Threads", 1 << 38),
)
GATEWAY_MESSAGE_CONTENT = 1 << 18
GATEWAY_MESSAGE_CONTENT_LIMITED = 1 << 19


def permissions() -> int:
    """The invite's ``permissions`` integer: the bits of ``PERMISSIONS``."""
    total = 0
    for _, bit in PERMISSIONS:
        total |= bit
    return total


def invite_url(application_id: str) -> str:
    query = {"client_id": application_id, "scope": SCOPES, "permissions": str(permissions())}
    return f"{AUTHORIZE_URL}?{urlencode(query)}"


def content_intent(flags: int) -> bool:
    return bool(flags & (GATEWAY_MESSAGE_CONTENT | GATEWAY_MESSAGE_CONTENT_LIMITED))


@dataclass(frozen=True)
class Application:
    id: str
    flags: int


async def application(
    token: str, settings: Settings, *, limit: float = TIMEOUT
) -> Application | str:
    """The bot's application, or why it could not be read (a sentence)."""
    base = (settings.discord.api_base_url or DISCORD_API).rstrip("/")
    headers = {"Authorization": f"Bot {token}"}
    answer = await request("GET", f"{base}/applications/@me", limit=limit, headers=headers)
    if not isinstance(answer, tuple):
        return answer.detail
    status, body = answer
    if status != 200 or not isinstance(body, dict) or not str(body.get("id", "")).isdigit():
        return f"Discord answered {status} for the application"
    flags = body.get("flags")
    return Application(str(body["id"]), flags if isinstance(flags, int) else 0)


def describe(app: Application) -> str:
    """The invite and the intent's state, as printed by ``chorus init``."""
    names = ", ".join(name for name, _ in PERMISSIONS)
    invite = prompts.render(
        "onboarding/discord_invite",
        url=invite_url(app.id),
        permissions=permissions(),
        names=names,
    )
    portal = f"https://discord.com/developers/applications/{app.id}/bot"
    name = (
        "onboarding/discord_intent_on"
        if content_intent(app.flags)
        else "onboarding/discord_intent_off"
    )
    return invite + "\n" + prompts.render(name, portal=portal)
