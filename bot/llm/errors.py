"""Errors a provider raises, each one specific enough for the operator to act on."""

from __future__ import annotations

import json
from typing import Any


class LLMError(Exception):
    """Base class of every provider error."""

    def __init__(self, message: str, *, provider: str = "", status: int | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status = status


class ProviderAuthError(LLMError):
    """401/403: the key is missing, wrong, or lacks access. Never retried."""

    def __init__(self, provider: str, status: int | None, key_env: str, key_url: str) -> None:
        super().__init__(
            f"{provider} rejected the credentials (HTTP {status}). "
            f"Check {key_env}; you can create or copy a key at {key_url}.",
            provider=provider,
            status=status,
        )
        self.key_env = key_env


class ProviderRequestError(LLMError):
    """The vendor refused the request itself (400, 404, 422): retrying cannot help."""


class ProviderUnavailable(LLMError):
    """Rate limited, overloaded, failing or unreachable, and every retry was used up."""

    def __init__(self, message: str, *, provider: str, status: int | None, attempts: int) -> None:
        super().__init__(message, provider=provider, status=status)
        self.attempts = attempts


class RealVendorCallBlocked(RuntimeError):
    """Raised when a test would reach a real LLM vendor instead of a loopback server."""


class MalformedAnswer(ValueError):
    """A 200 answer that is not the vendor's answer type (a proxy's page, a body cut short):
    the same request would get the same, so it is not retried."""


def answer_object(body: bytes, key: str) -> tuple[dict[str, Any], list[Any]]:
    """A whole answer's JSON object and the list under ``key`` in it (a message's ``content``,
    a completion's ``choices``), or ``MalformedAnswer`` saying which is missing."""
    try:
        answer = json.loads(body)
    except ValueError as exc:
        raise MalformedAnswer(f"the answer is not JSON: {exc}") from exc
    items = answer.get(key) if isinstance(answer, dict) else None
    if not isinstance(items, list):
        raise MalformedAnswer(f"the answer has no {key} list: {body[:120]!r}")
    return answer, items


def event_object(data: str) -> dict[str, Any]:
    """A streamed event's JSON object, or ``MalformedAnswer`` (a proxy's page, a body cut
    short)."""
    return json_object(data, "a stream event")


def json_object(text: str, what: str) -> dict[str, Any]:
    """``text`` as a JSON object, or ``MalformedAnswer`` naming ``what`` it should have been."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise MalformedAnswer(f"{what} that is not JSON: {text[:120]!r}") from exc
    if not isinstance(value, dict):
        raise MalformedAnswer(f"{what} that is not an object: {text[:120]!r}")
    return value
