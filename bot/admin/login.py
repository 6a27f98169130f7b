"""The dashboard's login form: a CSRF token before there is a session, and a rate limit per
client address shared by every process serving the dashboard.

Why a CSRF token on the login too: without one, any page a logged-out admin visits can post
guesses (or the attacker's own token, logging the browser into a session the attacker knows)
from the admin's browser and address. There is no session yet to derive a token from, so it is
a double submit: ``GET /login`` sets a random nonce in a signed cookie (HttpOnly,
SameSite=Strict, path ``/login``) and puts the same nonce in the form; ``POST /login`` needs
both, equal, and the cookie's signature valid (a cookie planted by a sibling subdomain cannot
be signed without the admin token).

Why the limit lives in Redis: any process may serve the dashboard (a load balancer may send
each attempt elsewhere), so the attempts are counted in one sorted set per address
(``bot.state.dashboard.LoginAttempts``). Each attempt is reserved in the
set atomically (one transaction: prune, add, read) *before* the token is checked, so attempts
racing through several processes or concurrent requests cannot exceed the limit; a right token
clears the set, a wrong one stays as a failure, a refused one is taken back. An attempt still
being checked counts against the limit too (it may be a wrong one), so one client gets at most
as many checks at once as it has attempts left; one refused only because of those is told to
retry in a second, not when the window ends. A script's ``Authorization: Bearer`` token goes
through the same reservation (a wrong one is a failed login; a blocked address gets a 429 even
with the right one, so the limit is no oracle). The address is the client's: the TCP peer, or
behind a reverse proxy listed in ``CHORUS_ADMIN_TRUST_PROXY`` the client that proxy names
(bot/admin/proxy.py). Behind an unlisted proxy every client shares the proxy's address, so the
limit then holds for all of them together (the safe side).
"""

from __future__ import annotations

import hmac
import math
import secrets
import time
import uuid
from collections.abc import Callable

from aiohttp import web
from itsdangerous import BadSignature

from bot.admin.auth import Auth
from bot.state.connect import Client
from bot.state.dashboard import LoginAttempts

LOGIN_COOKIE = "chorus_admin_login"
LOGIN_FAILURES = 5  # failed logins per address ...
LOGIN_WINDOW_SECONDS = 300  # ... within this many seconds; then a 429 until the oldest ages out
LOGIN_COOKIE_SECONDS = 3600
CHECKING_SECONDS = 10  # an attempt reserved this recently may still be being checked


class LoginGuard:
    """The login form's CSRF token and the per-address rate limit."""

    def __init__(
        self,
        auth: Auth,
        redis: Client,
        *,
        namespace: str = "main",
        failures: int = LOGIN_FAILURES,
        window: float = LOGIN_WINDOW_SECONDS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.auth = auth
        self.attempts = LoginAttempts(redis, namespace=namespace, window=window)
        self.namespace = namespace
        self.failures = failures
        self.window = window
        self.clock = clock
        self._nonces = auth.signer("login-csrf")

    # -- the pre-session CSRF token (double submit) -----------------------------------------------
    def form_token(self, request: web.Request) -> tuple[str, str | None]:
        """The nonce for the form, and the cookie to set (None: the browser's is still good)."""
        cookie = request.cookies.get(LOGIN_COOKIE, "")
        nonce = self._nonce(cookie)
        if nonce is not None:
            return nonce, None
        nonce = secrets.token_urlsafe(18)
        return nonce, self._nonces.sign(nonce).decode()

    def token_ok(self, request: web.Request, given: str) -> bool:
        nonce = self._nonce(request.cookies.get(LOGIN_COOKIE, ""))
        return nonce is not None and hmac.compare_digest(given.encode(), nonce.encode())

    def _nonce(self, cookie: str) -> str | None:
        """The nonce of a cookie this server signed; None otherwise."""
        try:
            return self._nonces.unsign(cookie).decode() or None
        except BadSignature:
            return None

    @staticmethod
    def set_cookie(response: web.StreamResponse, request: web.Request, cookie: str) -> None:
        response.set_cookie(
            LOGIN_COOKIE,
            cookie,
            max_age=LOGIN_COOKIE_SECONDS,
            httponly=True,
            samesite="Strict",
            secure=request.secure,
            path="/login",
        )

    # -- the rate limit ---------------------------------------------------------------------------
    async def attempt(self, address: str) -> tuple[str, int]:
        """Reserve one attempt for ``address``: ``(attempt id, 0)`` to go on and check the token,
        or ``("", seconds)``: refused, try again in that many seconds."""
        now, attempt = self.clock(), f"p{uuid.uuid4().hex}"  # p: being checked
        others = await self.attempts.reserve(address, attempt, now)
        if not self._retry([at for _, at in others], now):
            return attempt, 0
        await self.attempts.take_back(address, attempt)
        settled = [at for m, at in others if not (m[0] == "p" and now - at < CHECKING_SECONDS)]
        return "", self._retry(settled, now) or 1  # 1: refused only for attempts being checked

    def _retry(self, failures: list[float], now: float) -> int:
        """Seconds until fewer than ``self.failures`` of these are in the window (0: now)."""
        earlier = sorted(float(at) for at in failures)
        if len(earlier) < self.failures:
            return 0
        free_at = earlier[len(earlier) - self.failures] + self.window
        return max(1, math.ceil(free_at - now))

    async def failed(self, address: str, attempt: str = "") -> bool:
        """After a wrong token: ``attempt`` stays as a failure (even if a right token cleared
        the set meanwhile); whether the address is now blocked."""
        held = await self.attempts.replace(address, attempt, f"f{attempt[1:]}", self.clock())
        return held >= self.failures

    async def succeeded(self, address: str) -> None:
        await self.attempts.clear(address)
