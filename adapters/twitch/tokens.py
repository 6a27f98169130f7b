"""Where the bot user's refreshed Twitch tokens live between restarts.

A Twitch user access token lasts about four hours; twitchio refreshes it and, by default, writes
every token it manages to ``.tio.tokens.json`` in the working directory. Chorus switches that
off (``login(load_tokens=False, save_tokens=False)`` and no-op token hooks, see adapter.py) and
stores the pair where the operator says instead:

- ``TWITCH_TOKEN_STORE=redis`` (default): one JSON string at ``token_key(client_id)`` in the
  app's state store, so every process of a deployment shares the newest pair;
- ``TWITCH_TOKEN_STORE=file:/path/tokens.json``: a file written atomically with mode 0600.

A broadcaster's pair (``chorus auth twitch --broadcaster``, for the channel-point redemptions
only the broadcaster's token may read) lives beside the bot's, one per (application,
broadcaster): ``broadcaster_store`` opens it in the same store (``...:broadcaster:<id>`` in the
state store, ``<name>.broadcaster-<id>.json`` beside the file), and it is refreshed and written
back the same way. The command writes it there directly: the environment has no seed for it.

The stored pair remembers a fingerprint of the ``TWITCH_REFRESH_TOKEN`` it descends from. When
the operator puts a *new* pair in the environment (e.g. re-authorised with more scopes) the
stored one is stale and the environment wins; otherwise the stored (newer) pair wins.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from adapters.twitch.convert import PLATFORM
from bot.settings import Settings
from bot.state import keys
from bot.state.connect import mask_url, open_state
from bot.state.platforms import PlatformTokens

log = logging.getLogger("chorus.twitch.tokens")


def token_key(client_id: str) -> str:
    """The Redis key of the bot's Twitch tokens for the application ``client_id``."""
    return keys.platform_tokens("twitch", client_id)


def fingerprint(refresh_token: str) -> str:
    """A short one-way tag of a refresh token (never the token itself)."""
    return hashlib.sha256(refresh_token.encode()).hexdigest()[:16]


class StoredTokens(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    access_token: str
    refresh_token: str
    user_id: str | None = None
    seed: str = ""  # fingerprint of the TWITCH_REFRESH_TOKEN this pair descends from

    def __repr__(self) -> str:  # never show the tokens
        return f"StoredTokens(user_id={self.user_id!r}, seed={self.seed!r})"

    __str__ = __repr__


class TokenStore(Protocol):
    async def load(self) -> StoredTokens | None: ...

    async def save(self, tokens: StoredTokens) -> None: ...


def choose(stored: StoredTokens | None, access: str, refresh: str) -> StoredTokens:
    """The pair to start with: the stored one unless the environment's pair is newer."""
    seed = fingerprint(refresh)
    if stored is not None and stored.seed == seed:
        return stored
    if stored is not None:
        log.info("TWITCH_REFRESH_TOKEN changed since the stored tokens; using the environment's")
    return StoredTokens(access_token=access, refresh_token=refresh, seed=seed)


def _parse(raw: str | bytes | None, where: str) -> StoredTokens | None:
    if not raw:
        return None
    try:
        return StoredTokens.model_validate_json(raw)
    except ValidationError:
        log.warning("ignoring unreadable stored Twitch tokens", extra={"where": where})
        return None


class StateTokenStore:
    """The pair in the deployment's state store (``bot.state.platforms.PlatformTokens``)."""

    def __init__(self, tokens: PlatformTokens, client_id: str) -> None:
        self.tokens = tokens
        self.client_id = client_id

    async def load(self) -> StoredTokens | None:
        raw = await self.tokens.load(PLATFORM, self.client_id)
        return _parse(raw, f"the state store's {PLATFORM} tokens")

    async def save(self, tokens: StoredTokens) -> None:
        await self.tokens.save(PLATFORM, self.client_id, tokens.model_dump_json())


class StateBroadcasterStore:
    """A broadcaster's pair in the deployment's state store, beside the bot's."""

    def __init__(self, tokens: PlatformTokens, client_id: str, broadcaster_id: str) -> None:
        self.tokens = tokens
        self.client_id = client_id
        self.broadcaster_id = broadcaster_id

    async def load(self) -> StoredTokens | None:
        raw = await self.tokens.load_broadcaster(self.client_id, self.broadcaster_id)
        return _parse(raw, f"the state store's {PLATFORM} broadcaster tokens")

    async def save(self, tokens: StoredTokens) -> None:
        await self.tokens.save_broadcaster(
            self.client_id, self.broadcaster_id, tokens.model_dump_json()
        )


class FileTokenStore:
    def __init__(self, path: Path) -> None:
        self.path = path

    async def load(self) -> StoredTokens | None:
        try:
            raw = await asyncio.to_thread(self.path.read_text, encoding="utf-8")
        except FileNotFoundError:
            return None
        return _parse(raw, str(self.path))

    async def save(self, tokens: StoredTokens) -> None:
        await asyncio.to_thread(self._write, tokens.model_dump_json())

    def _write(self, text: str) -> None:
        # Write-then-rename: a crash mid-write never leaves half a token file behind.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def open_token_store(spec: str, *, tokens: PlatformTokens, client_id: str) -> TokenStore:
    """The store ``TWITCH_TOKEN_STORE`` names: ``redis`` (the state store) or ``file:/path``."""
    if spec.startswith("file:"):
        return FileTokenStore(Path(spec.removeprefix("file:")).expanduser())
    return StateTokenStore(tokens, client_id)


def broadcaster_store(
    spec: str, *, tokens: PlatformTokens | None, client_id: str, broadcaster_id: str
) -> TokenStore:
    """Where ``TWITCH_TOKEN_STORE`` keeps ``broadcaster_id``'s pair: beside the bot's."""
    if not broadcaster_id.isdigit():  # a Twitch user id; never a path of its own
        raise ValueError(f"not a Twitch user id: {broadcaster_id!r}")
    if spec.startswith("file:"):
        path = Path(spec.removeprefix("file:")).expanduser()
        name = f"{path.stem}.broadcaster-{broadcaster_id}{path.suffix or '.json'}"
        return FileTokenStore(path.with_name(name))
    assert tokens is not None, "the state store's tokens are needed without file:"
    return StateBroadcasterStore(tokens, client_id, broadcaster_id)


async def save_broadcaster(
    settings: Settings, client_id: str, *, access: str, refresh: str, user_id: str
) -> str:
    """Store a broadcaster's new pair (``chorus auth twitch --broadcaster``) where the adapter
    reads it; where it went, for the operator."""
    spec = settings.twitch.token_store
    pair = StoredTokens(access_token=access, refresh_token=refresh, user_id=user_id)
    if spec.startswith("file:"):
        store = broadcaster_store(spec, tokens=None, client_id=client_id, broadcaster_id=user_id)
        await store.save(pair)
        assert isinstance(store, FileTokenStore)
        return str(store.path)
    redis = await open_state(settings.state)
    try:
        tokens = PlatformTokens(redis)
        await broadcaster_store(
            spec, tokens=tokens, client_id=client_id, broadcaster_id=user_id
        ).save(pair)
    finally:
        await redis.aclose()
    return f"the state store ({mask_url(settings.state.redis_url)})"
