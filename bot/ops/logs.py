"""Structured logging to stderr that never prints a secret.

Records are one line each: logfmt by default (``ts=… level=… logger=… msg="…" key=value``) or
JSON (``CHORUS_LOG_FORMAT=json``). Fields come from ``extra={...}``. Every formatted line passes
through the redactor, which masks the configured secret values *and* anything shaped like a
vendor token, so a key that ends up in an exception message or a URL is still not logged.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", None, None)).keys()
    | {"message", "asctime", "taskName"}
)

# Shapes of well-known tokens: Anthropic/OpenAI keys, Slack tokens, Google API keys, bearer
# headers and passwords inside URLs.
_TOKEN_PATTERNS = (
    re.compile(r"sk-[A-Za-z0-9_\-]{16,}"),
    re.compile(r"xox[abposr]-[A-Za-z0-9\-]{10,}"),
    re.compile(r"xapp-[A-Za-z0-9\-]{10,}"),
    re.compile(r"AIza[0-9A-Za-z_\-]{20,}"),
    re.compile(r"ya29\.[A-Za-z0-9_\-]{20,}"),  # Google OAuth access tokens
    re.compile(r"1//[A-Za-z0-9_\-]{20,}"),  # Google OAuth refresh tokens
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{12,}"),
    re.compile(r"(?<=://)([^:/@\s]*):([^@/\s]+)@"),
    re.compile(r"(?i)((?:client_secret|refresh_token|access_token|token|api_key|key)=)[^&\s\"']+"),
)
MASK = "***"


class Redactor:
    """Masks known secret values and token-shaped strings."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        self._secrets: list[str] = []
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> None:
        for secret in secrets:
            if secret and len(secret) >= 4 and secret not in self._secrets:
                self._secrets.append(secret)
        self._secrets.sort(key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        for pattern in _TOKEN_PATTERNS:
            text = pattern.sub(_mask_match, text)
        return text


def _mask_match(match: re.Match[str]) -> str:
    if match.re.pattern.startswith("(?<=://)"):
        return f"{match.group(1)}:{MASK}@"
    if match.re.pattern.startswith(("(?i)(bearer", "(?i)((?:client_secret")):
        return f"{match.group(1)}{MASK}"
    return MASK


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {
        k: v for k, v in vars(record).items() if k not in _STANDARD_ATTRS and not k.startswith("_")
    }


def _logfmt_value(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if text and not any(c in text for c in ' ="\n\t'):
        return text
    return json.dumps(text)


class StructuredFormatter(logging.Formatter):
    def __init__(self, redactor: Redactor, fmt: str = "text") -> None:
        super().__init__()
        self.redactor = redactor
        self.json = fmt == "json"

    def format(self, record: logging.LogRecord) -> str:
        ts = datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
        data: dict[str, Any] = {
            "ts": ts.replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update(_fields(record))
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        if self.json:
            line = json.dumps(data, default=str, ensure_ascii=False)
        else:
            line = " ".join(f"{k}={_logfmt_value(v)}" for k, v in data.items())
        return self.redactor(line)


_redactor = Redactor()


def add_secrets(secrets: Iterable[str]) -> None:
    """Mask more values from now on (adapter tokens, a refreshed OAuth token)."""
    _redactor.add(secrets)


def redactor() -> Redactor:
    """The one redactor every log line passes through (the log feed's too)."""
    return _redactor


def redact(text: str) -> str:
    """``text`` as every log line prints it: each known secret masked."""
    return _redactor(text)


def setup_logging(
    level: str = "INFO",
    fmt: str = "text",
    secrets: Iterable[str] = (),
    stream: TextIO | None = None,
) -> Redactor:
    """Send every ``chorus`` log line (and library warnings) to stderr, structured and redacted."""
    _redactor.add(secrets)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(StructuredFormatter(_redactor, fmt))
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_chorus", False):
            root.removeHandler(old)
    handler._chorus = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("chorus").setLevel(level)
    # The SDKs log request bodies at DEBUG; keep them quiet unless asked.
    for noisy in (
        "httpx",
        "httpx2",
        "httpcore",
        "httpcore2",
        "anthropic",
        "openai",
        "google_genai",
    ):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return _redactor
