"""No secret leaves the dashboard: every page, export and refusal passes through ``Masker``.

Why on the way out and not only in the settings page: a secret can reach a page by many roads
(a URL setting that carries a password, a person who pasted a key into a chat line that became
a pin, an error message quoting a value), and each page is built from its own data. So the
dashboard masks, in every text it sends, the secret forms the settings know:

- every secret setting's value (``Settings.secret_values()``: API keys, platform tokens, the
  Redis password, the canary secret) and the admin token, as written, HTML-escaped and
  JSON-escaped, each replaced by ``***``;
- a URL's password, in its userinfo (``redis://user:***@host``) or a ``password=`` option
  (``redis://host/0?password=***``), the two forms ``bot.state.connect.mask_url`` masks, in any
  URL wherever it appears.

Secrets shorter than ``MIN_SECRET`` are left to the URL rules and the settings page's own
masking ("set, hidden"): replacing a short value everywhere would rewrite the page's markup.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable

from aiohttp import web

from bot.admin.auth import Handler, Middleware

MASK = "***"
MIN_SECRET = 8
_USERINFO = re.compile(r"(?<=://)([^:/@\s\"'<>]*):([^@/\s\"'<>]+)@")
_PASSWORD_OPTION = re.compile(r"(?i)((?:[?&;]|&amp;)password=)[^&#\s\"'<>]*")


def mask_urls(text: str) -> str:
    """``text`` with the password of every URL in it masked (userinfo and ``password=``)."""
    text = _USERINFO.sub(rf"\1:{MASK}@", text)
    return _PASSWORD_OPTION.sub(rf"\1{MASK}", text)


class Masker:
    """Masks the given secret values and every URL password in a text."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms = set()
        for secret in secrets:
            if len(secret) >= MIN_SECRET:
                forms |= {secret, html.escape(secret), json.dumps(secret)[1:-1]}
        self._forms = sorted(forms, key=len, reverse=True)  # a longer secret first

    def __call__(self, text: str) -> str:
        for form in self._forms:
            text = text.replace(form, MASK)
        return mask_urls(text)


def middleware(current: Callable[[], Masker]) -> Middleware:
    """Masks every text response and every refusal's text with ``current()``, asked per
    response (a reload that changes a secret is honoured at once)."""

    @web.middleware
    async def masked(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            response = await handler(request)
        except web.HTTPException as refused:
            if refused.text:
                refused.text = current()(refused.text)
            raise
        if isinstance(response, web.Response) and response.text:
            response.text = current()(response.text)
        return response

    return masked
