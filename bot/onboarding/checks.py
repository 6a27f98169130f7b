"""Trying a credential before it is written: one cheap authenticated request, with a timeout.

Each check asks the endpoint the bot will use (the ``*_BASE_URL`` settings, so a proxy, a
local server or a test's loopback server is what gets asked) for something free that needs the
credential: the model list of an LLM vendor, the bot's own user on Discord, ``auth.test`` on
Slack, token validation on Twitch, a token refresh on YouTube. A ``Check`` says whether the
credential was accepted, refused (re-ask it) or could not be tried (no answer: the operator may
keep it). The real-call guard of the test suite applies to the vendor checks as to the bot.

``aiohttp`` is imported by ``request``, when a check runs: the command line imports this
module for ``chorus init``'s flags on every command, and commands that make no request
(``chorus config``, ``reload``) need none. (Every vendor SDK imports aiohttp itself, so a
``chat`` or ``run`` loads it anyway.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from bot.llm.errors import RealVendorCallBlocked
from bot.llm.guard import check_endpoint
from bot.settings import Settings

TIMEOUT = 10.0
VENDOR_URLS = {
    "anthropic": "https://api.anthropic.com",
    "openai": "https://api.openai.com/v1",
    "gemini": "https://generativelanguage.googleapis.com",
}
DISCORD_API = "https://discord.com/api/v10"


@dataclass(frozen=True)
class Check:
    ok: bool
    detail: str
    refused: bool = False  # the credential itself was turned down (not an outage)


def run(check: Coroutine[Any, Any, Check]) -> Check:
    """Run one check coroutine to its end (the wizard is synchronous between questions)."""
    return asyncio.run(check)


async def request(method: str, url: str, *, limit: float, **kwargs: Any) -> tuple[int, Any] | Check:
    """``(status, JSON or None)``, or a ``Check`` saying why there was no answer."""
    import aiohttp

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=limit)) as http,
            http.request(method, url, **kwargs) as response,
        ):
            try:
                body = await response.json(content_type=None)
            except ValueError:
                body = None
            return response.status, body
    except TimeoutError:
        return Check(False, f"no answer from {url} within {limit:g} s")
    except aiohttp.ClientError as exc:
        return Check(False, f"could not reach {url}: {exc}")


class AuthFailed(Exception):
    """A ``chorus auth`` flow ended without credentials (refused, expired, timed out, no
    answer): the command exits with code 1 and this message."""


async def call(method: str, url: str, *, limit: float = TIMEOUT, **kwargs: Any) -> tuple[int, Any]:
    """``request`` for the ``chorus auth`` flows: no answer raises ``AuthFailed``."""
    answer = await request(method, url, limit=limit, **kwargs)
    if isinstance(answer, Check):
        raise AuthFailed(answer.detail)
    return answer


def _verdict(answer: tuple[int, Any] | Check, accepted: str, what: str) -> Check:
    if isinstance(answer, Check):
        return answer
    status, _ = answer
    if 200 <= status < 300:
        return Check(True, accepted)
    if status in (401, 403):
        return Check(False, f"{what} was refused ({status})", refused=True)
    return Check(False, f"the server answered {status}")


async def check_llm(
    vendor: str, key: str | None, base_url: str | None, *, limit: float = TIMEOUT
) -> Check:
    """List the vendor's models with ``key`` (an OpenAI-compatible server may need none)."""
    base = (base_url or VENDOR_URLS[vendor]).rstrip("/")
    try:
        check_endpoint(vendor, base)
    except RealVendorCallBlocked as exc:
        return Check(False, str(exc))
    headers: dict[str, str] = {}
    if vendor == "anthropic":
        url, headers = (
            f"{base}/v1/models",
            {"x-api-key": key or "", "anthropic-version": "2023-06-01"},
        )
    elif vendor == "gemini":
        url, headers = f"{base}/v1beta/models", {"x-goog-api-key": key or ""}
    else:
        url = f"{base}/models"
        if key:
            headers = {"Authorization": f"Bearer {key}"}
    answer = await request("GET", url, limit=limit, headers=headers)
    what = "the key" if key else "the request without a key"
    return _verdict(answer, f"{vendor} answered at {base}", what)


async def check_platform(
    platform: str, values: Mapping[str, str], settings: Settings, *, limit: float = TIMEOUT
) -> Check:
    """Try ``platform``'s credentials (``values`` by variable name) where its API allows."""
    if platform == "discord":
        base = (settings.discord.api_base_url or DISCORD_API).rstrip("/")
        headers = {"Authorization": f"Bot {values['DISCORD_TOKEN']}"}
        answer = await request("GET", f"{base}/users/@me", limit=limit, headers=headers)
        if not isinstance(answer, Check) and answer[0] == 200 and isinstance(answer[1], dict):
            return Check(True, f"Discord knows the bot as {answer[1].get('username')}")
        return _verdict(answer, "Discord accepted the token", "DISCORD_TOKEN")
    if platform == "slack":
        return await _slack(values, settings, limit)
    if platform == "twitch":
        base = settings.twitch.auth_base_url.rstrip("/")
        headers = {"Authorization": f"OAuth {values['TWITCH_ACCESS_TOKEN']}"}
        answer = await request("GET", f"{base}/oauth2/validate", limit=limit, headers=headers)
        body = answer[1] if isinstance(answer, tuple) and answer[0] == 200 else None
        if isinstance(body, dict) and body.get("client_id") != values["TWITCH_CLIENT_ID"]:
            detail = "TWITCH_ACCESS_TOKEN belongs to another application than TWITCH_CLIENT_ID"
            return Check(False, detail, refused=True)
        return _verdict(answer, "Twitch accepted the access token", "TWITCH_ACCESS_TOKEN")
    if platform == "youtube":
        form = {
            "client_id": values["YOUTUBE_CLIENT_ID"],
            "client_secret": values["YOUTUBE_CLIENT_SECRET"],
            "refresh_token": values["YOUTUBE_REFRESH_TOKEN"],
            "grant_type": "refresh_token",
        }
        answer = await request("POST", settings.youtube.token_url, limit=limit, data=form)
        if not isinstance(answer, Check) and answer[0] == 400:
            return Check(False, "Google refused the refresh token (400)", refused=True)
        return _verdict(answer, "Google refreshed the token", "the YouTube client or token")
    raise ValueError(f"unknown platform {platform!r}")


async def _slack(values: Mapping[str, str], settings: Settings, limit: float) -> Check:
    """``auth.test`` with the bot token, then ``apps.connections.open`` with the app token."""
    base = settings.slack.api_base_url.rstrip("/")
    for variable, method in (
        ("SLACK_BOT_TOKEN", "auth.test"),
        ("SLACK_APP_TOKEN", "apps.connections.open"),
    ):
        headers = {"Authorization": f"Bearer {values[variable]}"}
        answer = await request("POST", f"{base}/{method}", limit=limit, headers=headers)
        if isinstance(answer, Check):
            return answer
        status, body = answer
        if not (isinstance(body, dict) and body.get("ok")):
            error = body.get("error") if isinstance(body, dict) else f"HTTP {status}"
            return Check(False, f"Slack refused {variable}: {error}", refused=True)
    return Check(True, "Slack accepted both tokens")
