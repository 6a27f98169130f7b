"""Who may use the dashboard: ``CHORUS_ADMIN_TOKEN``, as a login that sets a signed session
cookie, or as ``Authorization: Bearer <token>`` for scripts; and CSRF protection on every change.

Why a signed cookie and no server-side sessions: any process may serve the dashboard, so a
session must be checkable anywhere without shared state; the signing key is derived from the
token, so changing the token logs everyone out. The cookie (``<session id>.<expiry>``, signed)
is HttpOnly and SameSite=Strict and lasts ``SESSION_SECONDS``. Every POST from a browser session
carries a CSRF token derived from the session id (a per-session token); a Bearer request carries
no ambient credential, so it needs none. Signatures are ``itsdangerous``'s (HMAC-SHA256, a key
per purpose derived from the token, checked in constant time); the token itself is compared in
constant time too (``hmac.compare_digest``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from itsdangerous import BadSignature, Signer

COOKIE = "chorus_admin"
SESSION_SECONDS = 12 * 3600
OPEN_PATHS = frozenset({"/login", "/static/admin.css", "/static/admin.js"})
SESSION_KEY = web.RequestKey("admin_session", str)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


BearerCheck = Callable[[web.Request, str], Awaitable[None]]


class Auth:
    def __init__(self, token: str) -> None:
        self._token = token.encode()
        # The rate limit on Bearer tokens (bot/admin/login.py): raises to refuse; None: none.
        self.bearer_check: BearerCheck | None = None
        self._sessions = self.signer("session")
        self._csrf = self.signer("csrf")

    # -- the token --------------------------------------------------------------------------------
    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self._token)

    # -- sessions ---------------------------------------------------------------------------------
    def new_session(self, now: float | None = None) -> str:
        sid = secrets.token_urlsafe(18)
        expires = int((now or time.time()) + SESSION_SECONDS)
        return self._sessions.sign(f"{sid}.{expires}").decode()

    def session_id(self, cookie: str | None, now: float | None = None) -> str | None:
        """The session id of a valid, unexpired cookie; None otherwise."""
        try:
            body = self._sessions.unsign(cookie or "").decode()
        except BadSignature:
            return None
        sid, _, expires = body.partition(".")
        if not expires.isdigit() or int(expires) < (now or time.time()):
            return None
        return sid

    def csrf_for(self, sid: str) -> str:
        return self._csrf.get_signature(sid).decode()

    def csrf_ok(self, sid: str, given: str) -> bool:
        return self._csrf.verify_signature(sid, given)

    def signer(self, purpose: str) -> Signer:
        """An ``itsdangerous`` signer keyed by the token, its own key per ``purpose`` (so no
        signature made for one purpose passes for another)."""
        return Signer(
            self._token,
            salt=f"chorus-admin-{purpose}",
            key_derivation="hmac",
            digest_method=hashlib.sha256,
        )

    # -- the middleware ---------------------------------------------------------------------------
    def middleware(self) -> Middleware:
        @web.middleware
        async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
            if request.path in OPEN_PATHS:
                return _hardened(await handler(request))
            bearer = request.headers.get("Authorization", "")
            if bearer.startswith("Bearer "):
                if self.bearer_check is not None:
                    await self.bearer_check(request, bearer[7:].strip())
                elif not self.token_ok(bearer[7:].strip()):
                    raise web.HTTPUnauthorized(text="wrong token")
                request[SESSION_KEY] = ""  # a script: no session, no CSRF needed
                return _hardened(await handler(request))
            sid = self.session_id(request.cookies.get(COOKIE))
            if sid is None:
                if request.method == "GET":
                    raise web.HTTPSeeOther("/login")
                raise web.HTTPUnauthorized(text="log in first")
            if request.method == "POST":
                form = await request.post()
                if not self.csrf_ok(sid, str(form.get("csrf", ""))):
                    raise web.HTTPForbidden(text="missing or wrong CSRF token; reload the page")
            request[SESSION_KEY] = sid
            return _hardened(await handler(request))

        return guard

    def set_cookie(self, response: web.StreamResponse, request: web.Request) -> None:
        response.set_cookie(
            COOKIE,
            self.new_session(),
            max_age=SESSION_SECONDS,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
            path="/",
        )


def _hardened(response: web.StreamResponse) -> web.StreamResponse:
    """No framing, no sniffing, no caching of pages that show people's data, no referrer."""
    headers = response.headers
    headers.setdefault(
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; style-src 'self'; frame-ancestors 'none'",
    )
    headers.setdefault("X-Frame-Options", "DENY")
    headers.setdefault("X-Content-Type-Options", "nosniff")
    headers.setdefault("Referrer-Policy", "no-referrer")
    headers.setdefault("Cache-Control", "no-store")
    return response
