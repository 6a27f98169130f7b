"""What an HTTP request to the Events API endpoint must pass before bolt may parse it.

Why here and first: bolt parses the body (JSON, a form, a form's ``payload`` JSON) while it
builds its request object, before it checks the signature, so a malformed body from anyone on
the internet would end in an HTTP 500 and an ERROR traceback. ``screen`` checks the
signature over the raw bytes first (until then the body is untrusted bytes and nothing reads
it), then that the body is UTF-8 and of a shape Slack sends: a JSON object, or a form whose
``payload``, if any, is a JSON object. Anything else is refused with a 4xx and a short reason
the endpoint logs in one line. The size cap is the web server's (``client_max_size``: 413).
The signature is computed here over the raw bytes (slack-sdk's verifier decodes the body as
UTF-8 first, and so raises on the very bytes this must refuse). Pure: no I/O, and the clock is
injected.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs

MAX_BODY_BYTES = 1024 * 1024  # Slack's event and command payloads are a few kilobytes
_JSON = "application/json"
_FORM = "application/x-www-form-urlencoded"
MAX_SKEW_SECONDS = 5 * 60  # Slack's rule: older requests may be replays


@dataclass(frozen=True, slots=True)
class Refusal:
    status: int
    reason: str


def signed(
    body: bytes,
    headers: Mapping[str, str],
    secret: str,
    clock: Callable[[], float] = time.time,
) -> bool:
    """Slack's ``v0`` signature: HMAC-SHA256 of ``v0:<timestamp>:<raw body>``, fresh timestamp."""
    stamp = headers.get("X-Slack-Request-Timestamp", "").strip()
    given = headers.get("X-Slack-Signature", "")
    if not stamp.isdigit() or not given.startswith("v0=") or not secret:
        return False
    if abs(clock() - int(stamp)) > MAX_SKEW_SECONDS:
        return False
    mac = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    return hmac.compare_digest("v0=" + mac.hexdigest(), given)


def screen(
    body: bytes,
    headers: Mapping[str, str],
    secret: str,
    clock: Callable[[], float] = time.time,
) -> Refusal | None:
    """Why this request must not reach bolt, or None when it may."""
    if not signed(body, headers, secret, clock):
        return Refusal(401, "missing, bad or stale signature")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return Refusal(400, "body is not UTF-8")
    kind = headers.get("Content-Type", "").split(";")[0].strip().lower()
    if kind == _JSON:
        return _json_object(text, "body")
    if kind == _FORM:
        try:
            form = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text))
        except ValueError:
            return Refusal(400, "malformed form body")
        payloads = form.get("payload")
        if payloads is not None:
            return _json_object(payloads[0], "form payload")
        return None
    return Refusal(415, f"unsupported content type {kind or '(none)'!r}")


def _json_object(text: str, what: str) -> Refusal | None:
    try:
        data = json.loads(text)
    except ValueError:
        return Refusal(400, f"{what} is not valid JSON")
    if not isinstance(data, dict):
        return Refusal(400, f"{what} is JSON but not an object")
    return None
