"""The vendor SDKs' HTTP clients: each SDK on its own maintained transport, over aiohttp.

Why the SDKs' own: the HTTP/1.1 framing, the connection pool, TLS and proxies are the part of a
model call where a mistake is a security bug, and each vendor maintains its transport against
its own API. Chorus only sets them up:

- **Anthropic and OpenAI** (``sdk_http_client``): the SDK's ``DefaultAioHttpClient``, httpx2's
  client API over aiohttp's connection pool and HTTP parser. Its settings are the SDK's own
  defaults: at most 1,000 connections open, an idle one kept 5 seconds, redirects followed. The
  SDK client's ``timeout`` (``CHORUS_LLM_TIMEOUT``) bounds each request's connect, each read and
  the wait for a pooled connection. The SDK client closes it (``client.close()``), and whoever
  built the SDK client closes that.
- **google-genai** (``gemini_client_args``): its own aiohttp session, made per event loop when
  first used and closed by ``client.aio.aclose()``, without a connection limit.

Proxies are the process's ``HTTP_PROXY`` / ``HTTPS_PROXY`` / ``ALL_PROXY`` / ``NO_PROXY`` (never
``.env``'s: Chorus's settings do not export it). httpx2 reads them (``trust_env``) and sends
each request through a transport with that proxy; google-genai's session reads the first two and
``NO_PROXY`` itself (aiohttp's ``trust_env``), and ``ALL_PROXY``, which aiohttp does not read,
is handed to it here as the session's proxy for the API's host.

The trust store is made with the client: httpx2's (``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, else
the system's CA certificates) and google-genai's (``SSL_CERT_FILE`` / ``SSL_CERT_DIR``, else
certifi's). A bundle that cannot be loaded is a ``ConfigError`` naming the variable and the
path, raised where the provider is built (at the first model call), not a connection error
retried until the provider gives up.
"""

from __future__ import annotations

import contextlib
import os
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aiohttp

from bot.settings import ConfigError

Client = TypeVar("Client")


def sdk_http_client(default_client: Callable[[], Client]) -> Client:
    """The SDK's ``DefaultAioHttpClient`` with its own defaults; ``ConfigError`` when the CA
    bundle it loads cannot be read."""
    with trust_store_named():
        return default_client()


def gemini_client_args(base_url: str) -> dict[str, Any] | None:
    """google-genai's ``HttpOptions.async_client_args``: the proxy for ``base_url`` when only
    ``ALL_PROXY`` names one (aiohttp reads ``HTTP(S)_PROXY`` and ``NO_PROXY`` itself)."""
    parts = urlsplit(base_url)
    found = urllib.request.getproxies()
    if found.get(parts.scheme) or not found.get("all"):
        return None
    if parts.hostname and urllib.request.proxy_bypass(parts.hostname):
        return None
    return {"proxy": found["all"]}


def refused_answer(exc: BaseException) -> aiohttp.ClientResponseError | None:
    """The refusal of aiohttp's HTTP parser behind ``exc`` (a response framed two ways, a bad
    header), if that is what ``exc`` is or wraps: the same request would get the same answer,
    so it is not retried."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, aiohttp.ClientResponseError):
            return seen
        seen = seen.__cause__
    return None


def transport_reason(exc: BaseException, default: str) -> str:
    """Why an SDK's connection or timeout error happened: aiohttp's own error where one is the
    cause and not a timeout (the SDKs' adapter reports a refused or untrusted connection as a
    connect timeout), else ``default``."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, aiohttp.ClientError):
        seen = seen.__cause__
    if seen is not None and not isinstance(seen, aiohttp.ServerTimeoutError):
        return f"connection error: {seen}"
    return default


@contextlib.contextmanager
def trust_store_named() -> Iterator[None]:
    """Around building an SDK client: a CA bundle that cannot be loaded becomes a
    ``ConfigError`` that says which variable to fix."""
    try:
        yield
    except OSError as exc:  # ssl.SSLError is one
        raise ConfigError(trust_store_error(exc)) from exc


def trust_store_error(exc: Exception) -> str:
    named = [f"{n}={v}" for n in ("SSL_CERT_FILE", "SSL_CERT_DIR") if (v := os.environ.get(n))]
    where = " and ".join(named) if named else "the system's CA bundle"
    return (
        f"the CA certificates for https to the model could not be loaded from {where}: {exc}. "
        "SSL_CERT_FILE / SSL_CERT_DIR must name a readable PEM bundle / directory; unset them "
        "to use the default."
    )
