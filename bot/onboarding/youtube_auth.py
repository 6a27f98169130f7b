"""``chorus auth youtube``: a refresh token for the bot's channel through Google's OAuth flow
for installed apps, with a loopback redirect and PKCE.

The flow (https://developers.google.com/identity/protocols/oauth2/native-app): a code verifier
(random, 86 URL-safe characters) and its S256 challenge are made; a server listens on
``127.0.0.1`` on a free port; the operator opens the consent URL (``GOOGLE_OAUTH_AUTH_URL`` with
the client id, the redirect ``http://127.0.0.1:PORT/``, ``response_type=code``, the scope
``youtube.force-ssl``, the challenge, a random ``state``, ``access_type=offline`` and
``prompt=consent`` so Google issues a refresh token every time). Google sends the browser back
to the loopback server with ``code`` and ``state`` (or ``error=access_denied``); the code, the
verifier and the client's id and secret are exchanged at ``GOOGLE_OAUTH_TOKEN_URL`` for the
tokens; ``channels.list?mine=true`` (``YOUTUBE_API_BASE_URL``) names the channel authorised.

A redirect whose ``state`` is not ours is answered 400 and ignored (another page cannot inject
a code). ``--port`` fixes the port, so a browser on another machine can reach it through
``ssh -L PORT:127.0.0.1:PORT``. No answer within ``--timeout`` ends the command with a clear message. Tokens are never
printed.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlencode

import prompts
from bot.onboarding.checks import AuthFailed, call
from bot.settings.youtube import YouTubeSettings

SCOPE = "https://www.googleapis.com/auth/youtube.force-ssl"


@dataclass(frozen=True)
class Channel:
    refresh_token: str
    channel_id: str
    title: str

    def __repr__(self) -> str:  # never show the token
        return f"Channel(channel_id={self.channel_id!r}, title={self.title!r})"


def challenge(verifier: str) -> str:
    """PKCE's S256 code challenge: base64url(sha256(verifier)) without padding."""
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


async def installed_app_flow(
    settings: YouTubeSettings,
    client_id: str,
    client_secret: str,
    *,
    patience: float,
    port: int = 0,
    say: Callable[[str], None] = print,
) -> Channel:
    """Run the flow, waiting at most ``patience`` seconds for the browser; raises
    ``AuthFailed`` (refused, timed out, no refresh token)."""
    from aiohttp import web

    verifier = secrets.token_urlsafe(64)
    state = secrets.token_urlsafe(24)
    answer: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def redirected(request: web.Request) -> web.Response:
        query = request.query
        if query.get("state") != state:
            return web.Response(status=400, text=prompts.load("onboarding/youtube_page_wrong"))
        if not answer.done():
            if "code" in query:
                answer.set_result(query["code"])
            else:
                error = query.get("error", "no code")
                answer.set_exception(
                    AuthFailed(
                        f"Google answered {error}: the consent was not given; nothing was "
                        "stored. Run `chorus auth youtube` again and choose Allow"
                    )
                )
        return web.Response(text=prompts.load("onboarding/youtube_page"))

    app = web.Application()
    app.router.add_get("/", redirected)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise AuthFailed(
            f"cannot listen on 127.0.0.1:{port} ({exc.strerror}); choose another --port"
        ) from None
    try:
        port = runner.addresses[0][1]
        redirect = f"http://127.0.0.1:{port}/"
        query = {
            "client_id": client_id,
            "redirect_uri": redirect,
            "response_type": "code",
            "scope": SCOPE,
            "code_challenge": challenge(verifier),
            "code_challenge_method": "S256",
            "state": state,
            "access_type": "offline",
            "prompt": "consent",
        }
        url = f"{settings.auth_url}?{urlencode(query)}"
        say(
            prompts.render(
                "onboarding/youtube_open", url=url, redirect=redirect, seconds=f"{patience:g}"
            )
        )
        try:
            code = await asyncio.wait_for(answer, patience)
        except TimeoutError:
            raise AuthFailed(
                f"no answer from the browser within {patience:g} s; nothing was stored. Run "
                "`chorus auth youtube` again (--timeout gives more time)"
            ) from None
    finally:
        await runner.cleanup()
    form = {
        "client_id": client_id,
        "client_secret": client_secret,
        "code": code,
        "code_verifier": verifier,
        "grant_type": "authorization_code",
        "redirect_uri": redirect,
    }
    status, body = await call("POST", settings.token_url, data=form)
    if status != 200 or not isinstance(body, dict):
        reason = body.get("error", "") if isinstance(body, dict) else ""
        raise AuthFailed(
            f"Google refused the code ({status} {reason}): check YOUTUBE_CLIENT_ID and "
            "YOUTUBE_CLIENT_SECRET (an OAuth client of type Desktop app)"
        )
    refresh, access = body.get("refresh_token"), body.get("access_token")
    if not refresh or not access:
        raise AuthFailed("Google issued no refresh token; nothing was stored")
    return await _channel(settings, str(refresh), str(access))


async def _channel(settings: YouTubeSettings, refresh: str, access: str) -> Channel:
    url = f"{settings.api_base_url.rstrip('/')}/channels"
    status, body = await call(
        "GET",
        url,
        params={"part": "snippet", "mine": "true"},
        headers={"Authorization": f"Bearer {access}"},
    )
    items = body.get("items") if isinstance(body, dict) else None
    if status != 200 or not items:
        raise AuthFailed(
            f"the account has no YouTube channel that Google names ({status}); sign in with the "
            "account of the channel the bot speaks as. Nothing was stored"
        )
    first = items[0]
    snippet = first.get("snippet") or {}
    return Channel(refresh, str(first.get("id", "")), str(snippet.get("title", "")))
