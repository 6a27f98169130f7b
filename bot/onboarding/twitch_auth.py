"""``chorus auth twitch``: the bot account's tokens through Twitch's Device Code Grant Flow.

The flow (https://dev.twitch.tv/docs/authentication/getting-tokens-oauth/#device-code-grant-flow):
``POST oauth2/device`` with the client id and the scopes answers a ``device_code`` (kept here),
a ``user_code`` and a ``verification_uri`` (shown to the operator), ``expires_in`` and the
polling ``interval``. Then ``POST oauth2/token`` with ``grant_type=urn:ietf:params:oauth:
grant-type:device_code`` is asked every ``interval`` seconds: Twitch answers 400 with
``{"status": 400, "message": "authorization_pending"}`` until the code is entered,
``slow_down`` when asked too often (the interval grows by five seconds, as RFC 8628 says), and
the token pair once the operator authorised. Chorus refreshes the pair with the client secret,
so its application is of client type Confidential and the polls carry the secret too. A
refusal (``access_denied``) or a code that ran out (``expired_token``, or ``invalid device
code`` once Twitch forgot it) ends the flow. The pair is then validated (``GET oauth2/validate``): it must carry every scope Chorus needs. A poll
without an answer (or a 5xx) is retried at the next interval, three in a row end the flow.

Every URL is under ``TWITCH_AUTH_BASE_URL``, so tests run the flow against a loopback server.
Tokens are never printed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import prompts
from bot.onboarding.checks import AuthFailed, call

SCOPES = ("user:read:chat", "user:write:chat", "user:bot")
# Asked for too, for the moderation actions (docs/moderation-actions.md); not required: they
# act only where the bot is a moderator, and a bot without them still chats.
MODERATION_SCOPES = ("moderator:manage:chat_messages", "moderator:manage:banned_users")
BROADCASTER_SCOPE = "channel:bot"
# ``chorus auth twitch --broadcaster``: the broadcaster's own token, for what only it may read.
REDEMPTION_SCOPES = ("channel:read:redemptions",)
DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"
SLOW_DOWN_STEP = 5.0
MAX_OUTAGES = 3  # polls in a row without an answer (or with a 5xx) before giving up
CONSOLE_URL = "https://dev.twitch.tv/console/apps"


@dataclass(frozen=True)
class Flow:
    """What one run of the device flow asks for: the bot's sign-in, or a broadcaster's."""

    scopes: tuple[str, ...] = SCOPES + MODERATION_SCOPES  # asked for
    required: tuple[str, ...] = SCOPES  # the token must carry every one
    command: str = "chorus auth twitch"  # what the operator runs again
    prompt: str = "onboarding/twitch_device"  # who logs in where


BOT = Flow()
BROADCASTER = Flow(
    scopes=REDEMPTION_SCOPES,
    required=REDEMPTION_SCOPES,
    command="chorus auth twitch --broadcaster",
    prompt="onboarding/twitch_device_broadcaster",
)


@dataclass(frozen=True)
class Granted:
    access_token: str
    refresh_token: str
    login: str
    user_id: str

    def __repr__(self) -> str:  # never show the tokens
        return f"Granted(login={self.login!r}, user_id={self.user_id!r})"


def _reason(body: Any) -> str:
    """Twitch's ``message`` (or an RFC 6749 ``error``) of an error body."""
    if isinstance(body, dict):
        return str(body.get("message") or body.get("error") or "")
    return ""


async def device_flow(
    base: str,
    client_id: str,
    client_secret: str = "",
    *,
    patience: float | None = None,
    say: Callable[[str], None] = print,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    flow: Flow = BOT,
) -> Granted:
    """Run the flow against ``base`` (``TWITCH_AUTH_BASE_URL``), waiting at most ``patience``
    seconds (default: the code's lifetime); raises ``AuthFailed``."""
    scopes = " ".join(flow.scopes)
    status, body = await call(
        "POST", f"{base}oauth2/device", data={"client_id": client_id, "scopes": scopes}
    )
    if status != 200 or not isinstance(body, dict) or "device_code" not in body:
        raise AuthFailed(
            f"Twitch refused to start the device flow ({status} {_reason(body)}): check "
            f"TWITCH_CLIENT_ID, and that the application at {CONSOLE_URL} is of client type "
            "Public or allows the device code flow"
        )
    expires = float(body.get("expires_in") or 1800)
    interval = max(float(body.get("interval") or 5), 1.0)
    say(
        prompts.render(
            flow.prompt,
            url=str(body.get("verification_uri", "https://www.twitch.tv/activate")),
            code=str(body.get("user_code", "")),
            minutes=max(1, round(expires / 60)),
        )
    )
    limit = expires if patience is None else min(expires, patience)
    deadline = time.monotonic() + limit
    form = {
        "client_id": client_id,
        "scopes": scopes,
        "device_code": str(body["device_code"]),
        "grant_type": DEVICE_GRANT,
    }
    if client_secret:  # a Confidential application authenticates its token requests
        form["client_secret"] = client_secret
    outages = 0
    while True:
        if time.monotonic() + interval > deadline:
            raise AuthFailed(
                f"nobody entered the code within {limit:g} s; run `{flow.command}` again"
            )
        await sleep(interval)
        try:
            status, answer = await call("POST", f"{base}oauth2/token", data=form)
        except AuthFailed:
            status, answer = 0, None
        if status == 0 or status >= 500:  # no answer, or Twitch failing: poll on, a while
            outages += 1
            if outages >= MAX_OUTAGES:
                raise AuthFailed(
                    f"Twitch's token endpoint failed {outages} polls in a row "
                    f"({status or 'no answer'}); nothing was stored"
                )
            continue
        outages = 0
        if status == 200 and isinstance(answer, dict) and answer.get("access_token"):
            return await _validated(base, client_id, answer, flow)
        reason = _reason(answer)
        if reason == "authorization_pending":
            continue
        if reason == "slow_down":
            interval += SLOW_DOWN_STEP
            continue
        if reason == "access_denied":
            raise AuthFailed(
                "the authorisation was denied at Twitch; nothing was stored. Run "
                f"`{flow.command}` again and choose Authorize"
            )
        if reason in ("expired_token", "invalid device code"):
            raise AuthFailed(
                "the code expired before it was authorised; nothing was stored. Run "
                f"`{flow.command}` again"
            )
        raise AuthFailed(f"Twitch refused the token request ({status} {reason})")


async def _validated(base: str, client_id: str, answer: dict[str, Any], flow: Flow) -> Granted:
    access, refresh = str(answer["access_token"]), str(answer.get("refresh_token") or "")
    if not refresh:
        raise AuthFailed("Twitch issued no refresh token; nothing was stored")
    headers = {"Authorization": f"OAuth {access}"}
    status, body = await call("GET", f"{base}oauth2/validate", headers=headers)
    if status != 200 or not isinstance(body, dict):
        raise AuthFailed(f"Twitch did not validate the new token ({status} {_reason(body)})")
    if body.get("client_id") not in (None, client_id):
        raise AuthFailed("the new token belongs to another application than TWITCH_CLIENT_ID")
    granted = set(body.get("scopes") or ())
    missing = [scope for scope in flow.required if scope not in granted]
    if missing:
        raise AuthFailed(
            f"the token lacks the scope{'s' if len(missing) > 1 else ''} {', '.join(missing)}; "
            f"nothing was stored. Run `{flow.command}` again and accept every permission"
        )
    return Granted(access, refresh, str(body.get("login", "")), str(body.get("user_id", "")))


def broadcaster_url(base: str, client_id: str, redirect_uri: str) -> str:
    """The link a broadcaster opens once so the bot may chat in their channel (``channel:bot``)."""
    query = {
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "response_type": "token",
        "scope": BROADCASTER_SCOPE,
    }
    return f"{base}oauth2/authorize?{urlencode(query)}"
