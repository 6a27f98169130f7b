"""Samples of the Twitch conduit variables for ``tests/test_settings_sources.py``'s SAMPLES
(variable -> where it lands, the text in .env, the value expected; never the default)."""

from __future__ import annotations

from typing import Any

TWITCH_CONDUIT_SAMPLES: dict[str, tuple[tuple[str, ...], str, Any]] = {
    "TWITCH_TRANSPORT": (("twitch.transport",), "conduit", "conduit"),
    "TWITCH_CONDUIT_ID": (("twitch.conduit_id",), "conduit-env-file", "conduit-env-file"),
    "TWITCH_CONDUIT_SHARDS": (("twitch.conduit_shards",), "12", 12),
    "TWITCH_SHARD_LEASE_SECONDS": (("twitch.shard_lease_seconds",), "30", 30.0),
}
