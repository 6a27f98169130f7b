"""Logging: structured lines on the given stream, and no secret ever printed."""

from __future__ import annotations

import io
import json
import logging

import pytest

from bot.ops import logs
from bot.ops.logs import Redactor, setup_logging


@pytest.fixture(autouse=True)
def _fresh_redactor(monkeypatch: pytest.MonkeyPatch) -> None:
    """The process's one redactor, new for each test here: secrets an earlier test of the same
    worker added (a token such as ``"secret"`` masks part of ``client_secret=``) stay out."""
    monkeypatch.setattr(logs, "_redactor", Redactor())


def _capture(fmt: str, secrets: list[str]) -> tuple[io.StringIO, logging.Logger]:
    stream = io.StringIO()
    setup_logging("DEBUG", fmt, secrets, stream=stream)
    return stream, logging.getLogger("chorus.test")


def test_logfmt_line_carries_extra_fields() -> None:
    stream, log = _capture("text", [])
    log.info("turn finished", extra={"exit": "answered", "llm_ms": 12.5})
    line = stream.getvalue().strip().splitlines()[-1]
    assert 'msg="turn finished"' in line
    assert "exit=answered" in line and "llm_ms=12.5" in line and "level=info" in line


def test_json_format_is_one_object_per_line() -> None:
    stream, log = _capture("json", [])
    log.warning("careful", extra={"attempt": 2})
    record = json.loads(stream.getvalue().strip().splitlines()[-1])
    assert record["msg"] == "careful" and record["attempt"] == 2 and record["level"] == "warning"


def test_configured_secret_is_masked_everywhere() -> None:
    secret = "my-very-secret-value-123"
    stream, log = _capture("text", [secret])
    log.error("key was %s", secret, extra={"header": f"x-api-key: {secret}"})
    try:
        raise RuntimeError(f"bad key {secret}")
    except RuntimeError:
        log.exception("boom")
    output = stream.getvalue()
    assert secret not in output
    assert output.count("***") >= 3


def test_token_shaped_strings_are_masked_without_configuration() -> None:
    redact = Redactor()
    text = (
        "anthropic sk-ant-api03-abcdefghijklmnopqrstuv slack xoxb-1234567890-abcdef "
        "google AIzaSyA1234567890abcdefghijklmn Authorization: Bearer abc.def.ghijklmnop "
        "redis://user:pa55word@host:6379/0"
    )
    masked = redact(text)
    for leaked in (
        "abcdefghijklmnopqrstuv",
        "1234567890-abcdef",
        "1234567890abcdefghijklmn",
        "abc.def.ghijklmnop",
        "pa55word",
    ):
        assert leaked not in masked
    assert "redis://user:***@host:6379/0" in masked
    assert "Bearer ***" in masked


def test_secrets_in_query_strings_and_added_later_are_masked() -> None:
    from bot.ops.logs import add_secrets

    stream, log = _capture("text", [])
    add_secrets(["late-added-secret-42"])
    log.error(
        "refresh failed: POST https://id.example/oauth2/token?client_secret=abc123&"
        "refresh_token=zzz999&grant_type=refresh_token with late-added-secret-42"
    )
    output = stream.getvalue()
    for leaked in ("abc123", "zzz999", "late-added-secret-42"):
        assert leaked not in output
    assert "grant_type=refresh_token" in output
