"""The Events API endpoint's screen (adapters/slack/ingress.py): the signature over the raw bytes
first, then the shapes Slack sends. Pure, with an injected clock."""

from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import urlencode

import pytest

from adapters.slack.ingress import MAX_SKEW_SECONDS, Refusal, screen, signed

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
NOW = 1_700_000_000.0
JSON = "application/json"
FORM = "application/x-www-form-urlencoded"


def headers(
    body: bytes, *, at: float = NOW, secret: str = SECRET, kind: str = JSON
) -> dict[str, str]:
    stamp = str(int(at))
    mac = hmac.new(secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256)
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": f"v0={mac.hexdigest()}",
        "Content-Type": kind,
    }


def check(body: bytes, sent: dict[str, str]) -> Refusal | None:
    return screen(body, sent, SECRET, clock=lambda: NOW)


def test_slacks_documented_example_signature_verifies() -> None:
    """The worked example of Slack's "Verifying requests" guide, byte for byte."""
    body = (
        b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id="
        b"G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook"
        b"-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F3977"
        b"00885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d"
        b"10d2c447fce8b6703c"
    )
    sent = {
        "X-Slack-Request-Timestamp": "1531420618",
        "X-Slack-Signature": "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503",
    }
    assert signed(body, sent, SECRET, clock=lambda: 1531420618.0)
    assert not signed(body + b"x", sent, SECRET, clock=lambda: 1531420618.0)


@pytest.mark.parametrize(
    "change",
    [
        {"X-Slack-Signature": ""},
        {"X-Slack-Signature": "v1=abc"},
        {"X-Slack-Request-Timestamp": "soon"},
        {"X-Slack-Request-Timestamp": ""},
    ],
)
def test_missing_or_malformed_signature_headers_are_401(change: dict[str, str]) -> None:
    body = b"{}"
    assert check(body, {**headers(body), **change}) == Refusal(
        401, "missing, bad or stale signature"
    )


def test_a_stale_or_future_timestamp_is_401_even_when_signed() -> None:
    body = b"{}"
    assert check(body, headers(body, at=NOW - MAX_SKEW_SECONDS - 1)) is not None
    assert check(body, headers(body, at=NOW + MAX_SKEW_SECONDS + 1)) is not None
    assert check(body, headers(body, at=NOW - MAX_SKEW_SECONDS + 1)) is None


def test_the_wrong_secret_or_no_secret_is_401() -> None:
    body = b"{}"
    assert check(body, headers(body, secret="other")) is not None
    assert screen(body, headers(body), "", clock=lambda: NOW) is not None


def test_non_utf8_bytes_are_verified_then_refused_as_400() -> None:
    body = b'{"text": "\xff"}'
    assert check(body, headers(body)) == Refusal(400, "body is not UTF-8")


@pytest.mark.parametrize(
    ("body", "kind", "reason"),
    [
        (b"{oops", JSON, "body is not valid JSON"),
        (b"[]", JSON, "body is JSON but not an object"),
        (b"null", JSON, "body is JSON but not an object"),
        (b"a=1&b", FORM, "malformed form body"),
        (b"payload=%7Boops", FORM, "form payload is not valid JSON"),
        (b"payload=7", FORM, "form payload is JSON but not an object"),
        (b"hi", "text/plain", "unsupported content type 'text/plain'"),
    ],
)
def test_shapes_slack_never_sends_are_refused(body: bytes, kind: str, reason: str) -> None:
    refused = check(body, headers(body, kind=kind))
    assert refused is not None and refused.reason == reason and 400 <= refused.status < 500


@pytest.mark.parametrize(
    ("body", "kind"),
    [
        (json.dumps({"type": "url_verification", "challenge": "c"}).encode(), JSON),
        (json.dumps({"event": {"type": "app_mention"}}).encode(), f"{JSON}; charset=utf-8"),
        (urlencode({"command": "/chorus", "text": "help"}).encode(), FORM),
        (urlencode({"payload": json.dumps({"type": "block_actions"})}).encode(), FORM),
        (b"", FORM),
    ],
)
def test_what_slack_sends_passes(body: bytes, kind: str) -> None:
    assert check(body, headers(body, kind=kind)) is None
