"""Who must grant what before Chorus reads a channel's chat over a conduit, and what to tell the
operator when a grant is missing.

Conduit subscriptions are created with the application's access token (client credentials),
which carries no scopes of its own: Twitch checks grants the users gave the application. For the
chat types Chorus subscribes to (``channel.chat.message``, ``.message_delete``,
``.clear_user_messages``, ``.notification``) Twitch requires, with an app access token:

- from the chatting user (the bot account, ``user_id`` of the condition): ``user:read:chat``
  and ``user:bot``;
- from the channel: the broadcaster's ``channel:bot`` grant, **or** the bot being one of the
  channel's moderators.

``stream.online`` / ``stream.offline`` need no grant. Sending (Send Chat Message) stays on the
bot's user token (``user:write:chat``), so it needs nothing more.

The bot's own scopes are known at start (Twitch's validation of its token lists them), so a
missing one fails the start with the scope to grant (``check_bot_scopes``). The broadcaster's
grant is not visible to the application: Twitch answers 403 when it is missing, and
``refusal`` turns that answer into what the broadcaster must do.
"""

from __future__ import annotations

from collections.abc import Iterable

from bot.settings import ConfigError
from bot.settings.twitch import TOKEN_HELP

BOT_SCOPES = ("user:read:chat", "user:bot")  # the bot account's, for chat over a conduit
CHAT_TYPES = frozenset(
    {
        "channel.chat.message",
        "channel.chat.message_delete",
        "channel.chat.clear_user_messages",
        "channel.chat.notification",
    }
)


def check_bot_scopes(scopes: Iterable[str], bot_login: str) -> None:
    """``ConfigError`` naming the scopes the bot account has not granted (conduit transport)."""
    missing = [scope for scope in BOT_SCOPES if scope not in set(scopes)]
    if missing:
        raise ConfigError(
            f"TWITCH_TRANSPORT=conduit reads chat with the app access token, which Twitch allows "
            f"only when the bot account {bot_login} has granted {' and '.join(BOT_SCOPES)}; its "
            f"token lacks {', '.join(missing)}: {TOKEN_HELP}"
        )


def refusal(
    *, status: int, sub_type: str, channel: str, bot_login: str, client_id: str, detail: str = ""
) -> str:
    """What to do about Twitch refusing the ``sub_type`` subscription in ``channel``."""
    if status == 403 and sub_type in CHAT_TYPES:
        return (
            f"Twitch refused to let {bot_login} read #{channel}'s chat: the broadcaster {channel} "
            f"has not granted this app (client id {client_id}) the channel:bot scope, and "
            f"{bot_login} is not a moderator there. Either {channel} signs in to the app once "
            f"with the channel:bot scope (docs/platforms/twitch.md, 'Twitch conduits'), or "
            f"{channel} makes the bot a moderator by typing /mod {bot_login} in their chat; "
            f"then `chorus twitch join {channel}` again"
        )
    if status == 401:
        return (
            f"Twitch refused the app access token for {sub_type} in #{channel} (HTTP 401); "
            "check TWITCH_CLIENT_ID and TWITCH_CLIENT_SECRET"
        )
    return f"Twitch refused {sub_type} in #{channel} (HTTP {status}) {detail}".rstrip()
