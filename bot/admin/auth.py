"""Who may use the dashboard: ``CHORUS_ADMIN_TOKEN``, as a login that sets a signed session
cookie, or as ``Authorization: Bearer <token>`` for scripts; and CSRF protection on every change.

Why a signed cookie: any process may serve the dashboard, so a session must be checkable
anywhere; the signing key is derived from the token, so changing the token logs everyone out.
The cookie (``<session id>.<expiry in ms>[.<account>]``, signed; a named account's role is read
from Redis on each request, so a removed account or a changed role holds at once) is HttpOnly and SameSite=Strict (and
Secure when the request came over https) and lasts ``SESSION_SECONDS``. What ends a session
early (a logout, a change of token seen by another process) is kept in Redis
(bot/admin/sessions.py) and asked through ``session_check`` on every request. Every POST from a
browser session carries a CSRF token derived from the session id (a per-session token); a
Bearer request carries no ambient credential, so it needs none. Signatures are
``itsdangerous``'s (HMAC-SHA256, a key per purpose derived from the token, checked in constant
time); the token itself is compared in constant time too (``hmac.compare_digest``).

Every response, refusals and redirects included, carries the hardening headers (no framing, no
sniffing, no caching, no referrer).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from aiohttp import web
from itsdangerous import BadSignature, Signer

COOKIE = "chorus_admin"
TOKEN_ROLE = "admin"  # the admin token's sessions and Bearer requests may do everything
SESSION_SECONDS = 12 * 3600
OPEN_PATHS = frozenset({"/login", "/static/admin.css", "/static/admin.js"})
OPEN_PREFIX = "/overlay/"  # the stream overlay checks its own per-channel key (overlay.py)
SESSION_KEY = web.RequestKey("admin_session", str)
ACCOUNT_KEY = web.RequestKey("admin_account", str)  # "" for the token's sessions and Bearer
ROLE_KEY = web.RequestKey("admin_role", str)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
Middleware = Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]


BearerCheck = Callable[[web.Request, str], Awaitable[None]]


class Session(NamedTuple):
    """A session cookie's contents, once its signature is checked."""

    sid: str
    expires: float  # epoch seconds
    account: str = ""  # a named account's session ("": the admin token's)

    @property
    def issued(self) -> float:
        return self.expires - SESSION_SECONDS


SessionCheck = Callable[[Session], Awaitable[bool]]
RoleOf = Callable[[str], Awaitable[str | None]]  # an account's role now (None: no account)


class Auth:
    def __init__(self, token: str) -> None:
        self._token = token.encode()
        # The rate limit on Bearer tokens (bot/admin/login.py): raises to refuse; None: none.
        self.bearer_check: BearerCheck | None = None
        # Whether a signed, unexpired session is still in force (bot/admin/sessions.py).
        self.session_check: SessionCheck | None = None
        # A named account's role, read on each request (bot/admin/accounts.py); None: no accounts.
        self.role_of: RoleOf | None = None
        self._sessions = self.signer("session")
        self._csrf = self.signer("csrf")

    # -- the token --------------------------------------------------------------------------------
    def token_ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self._token)

    # -- sessions ---------------------------------------------------------------------------------
    def new_session(self, now: float | None = None, account: str = "") -> str:
        """A new session's cookie: a new random id each time (a login never reuses one)."""
        sid = secrets.token_urlsafe(18)
        expires_ms = int(((now or time.time()) + SESSION_SECONDS) * 1000)
        tail = f".{account}" if account else ""
        return self._sessions.sign(f"{sid}.{expires_ms}{tail}").decode()

    def session(self, cookie: str | None, now: float | None = None) -> Session | None:
        """The session of a cookie this token signed and that has not expired; None otherwise
        (whether it was ended early is ``session_check``'s to say)."""
        try:
            body = self._sessions.unsign(cookie or "").decode()
        except BadSignature:
            return None
        sid, _, rest = body.partition(".")
        expires_ms, _, account = rest.partition(".")
        if not (sid and expires_ms.isdigit()):
            return None
        expires = int(expires_ms) / 1000
        return Session(sid, expires, account) if expires >= (now or time.time()) else None

    def session_id(self, cookie: str | None, now: float | None = None) -> str | None:
        """The session id of a valid, unexpired cookie; None otherwise."""
        found = self.session(cookie, now)
        return found.sid if found is not None else None

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
            try:
                return _hardened(await self._guarded(request, handler))
            except web.HTTPException as refused:  # a refusal or a redirect: hardened too
                _hardened(refused)
                raise

        return guard

    async def _guarded(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in OPEN_PATHS or request.path.startswith(OPEN_PREFIX):
            return await handler(request)
        bearer = request.headers.get("Authorization", "")
        if bearer.startswith("Bearer "):
            if self.bearer_check is not None:
                await self.bearer_check(request, bearer[7:].strip())
            elif not self.token_ok(bearer[7:].strip()):
                raise web.HTTPUnauthorized(text="wrong token")
            request[SESSION_KEY] = ""  # a script: no session, no CSRF needed
            request[ACCOUNT_KEY], request[ROLE_KEY] = "", TOKEN_ROLE
            return await handler(request)
        session = self.session(request.cookies.get(COOKIE))
        if session is not None and self.session_check is not None:
            session = session if await self.session_check(session) else None
        role: str | None = TOKEN_ROLE
        if session is not None and session.account:
            role = await self.role_of(session.account) if self.role_of is not None else None
            session = session if role is not None else None  # the account was removed
        if session is None or role is None:
            if request.method == "GET":
                raise web.HTTPSeeOther("/login")
            raise web.HTTPUnauthorized(text="log in first")
        if request.method == "POST":
            form = await request.post()
            if not self.csrf_ok(session.sid, str(form.get("csrf", ""))):
                raise web.HTTPForbidden(text="missing or wrong CSRF token; reload the page")
        request[SESSION_KEY] = session.sid
        request[ACCOUNT_KEY], request[ROLE_KEY] = session.account, role
        return await handler(request)

    def set_cookie(
        self, response: web.StreamResponse, request: web.Request, account: str = ""
    ) -> None:
        response.set_cookie(
            COOKIE,
            self.new_session(account=account),
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
