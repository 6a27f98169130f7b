"""Samples of the safety, quota and spool variables for ``tests/test_settings_sources.py``'s
SAMPLES (variable -> where it lands, the text in .env, the value expected; never the default)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

SAFETY_SAMPLES: dict[str, tuple[tuple[str, ...], str, Any]] = {
    "CHORUS_SAFETY_PRESET": (("safety.preset",), "streamer", "streamer"),
    "CHORUS_SAFETY_PRESET_PLATFORMS": (
        ("safety.preset_platforms",),
        "twitch, discord",
        frozenset({"twitch", "discord"}),
    ),
    "CHORUS_MODERATION_WORDS": (
        ("safety.words",),
        "spoiler, boss fight",
        ("spoiler", "boss fight"),
    ),
    "CHORUS_MODERATION_PATTERNS": (("safety.patterns",), r"free\s+v-?bucks", (r"free\s+v-?bucks",)),
    "CHORUS_MODERATION_LIST_FILE": (("safety.list_file",), "words.txt", Path("words.txt")),
    "CHORUS_MODERATION_DEFAULT_LISTS": (("safety.default_lists",), "false", False),
    "CHORUS_MODERATION_ACTION": (("safety.action",), "ignore", "ignore"),
    "CHORUS_MODERATION_LINKS": (("safety.links",), "deny", "deny"),
    "CHORUS_MODERATION_LINK_DOMAINS": (
        ("safety.link_domains",),
        "Twitch.tv, *.youtube.com",
        frozenset({"twitch.tv", "youtube.com"}),
    ),
    "CHORUS_MODERATION_PERSONAL_DATA": (("safety.personal_data",), "true", True),
    "CHORUS_MODERATION_INJECTION": (("safety.injection",), "block", "block"),
    "CHORUS_MODERATION_MODEL": (
        ("safety.model",),
        "openai:omni-moderation-latest",
        "openai:omni-moderation-latest",
    ),
    "CHORUS_MODERATION_RULES_FILE": (("safety.rules_file",), "rules.md", Path("rules.md")),
    "CHORUS_MODERATION_TIMEOUT": (("safety.timeout",), "1.5", 1.5),
    "CHORUS_MODERATION_FAIL": (("safety.fail",), "closed", "closed"),
    "CHORUS_SAFETY_CANARY": (("safety.canary",), "false", False),
    "CHORUS_SAFETY_CANARY_SECRET": (("safety.canary_secret",), "canary-secret", "canary-secret"),
    "CHORUS_AUDIT_MAX_ENTRIES": (("safety.audit_max_entries",), "500", 500),
    "CHORUS_USERS_BLOCKED": (("safety.blocked_users",), "twitch:123", frozenset({"twitch:123"})),
    "CHORUS_USERS_ALLOWED": (("safety.allowed_users",), "discord:9", frozenset({"discord:9"})),
    "CHORUS_QUOTA_USER_MESSAGES_HOUR": (("quota.user_messages_hour",), "30", 30),
    "CHORUS_QUOTA_USER_MESSAGES_DAY": (("quota.user_messages_day",), "200", 200),
    "CHORUS_QUOTA_USER_TOKENS_HOUR": (("quota.user_tokens_hour",), "100000", 100_000),
    "CHORUS_QUOTA_USER_TOKENS_DAY": (("quota.user_tokens_day",), "500000", 500_000),
    "CHORUS_QUOTA_CHANNEL_MESSAGES_HOUR": (("quota.channel_messages_hour",), "300", 300),
    "CHORUS_QUOTA_CHANNEL_MESSAGES_DAY": (("quota.channel_messages_day",), "2000", 2000),
    "CHORUS_QUOTA_CHANNEL_TOKENS_HOUR": (("quota.channel_tokens_hour",), "1000000", 1_000_000),
    "CHORUS_QUOTA_CHANNEL_TOKENS_DAY": (("quota.channel_tokens_day",), "5000000", 5_000_000),
    "CHORUS_QUOTA_COST_USD_DAY": (("quota.cost_usd_per_day",), "10", 10.0),
    "CHORUS_QUOTA_EXEMPT_MODERATORS": (("quota.exempt_moderators",), "false", False),
    # the gateway spool's place and signing key (bot/bus/spool_key.py)
    "CHORUS_DATA_DIR": (("state.data_dir",), "/var/lib/chorus", "/var/lib/chorus"),
    "CHORUS_SPOOL_SECRET": (("state.spool_secret",), "spool-secret", "spool-secret"),
    "CHORUS_SPOOL_CORRUPT_RETENTION": (("state.spool_corrupt_retention",), "3600", 3600),
}
