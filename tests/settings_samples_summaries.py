"""Samples of the conversation-summary and community-memory variables for
``tests/test_settings_sources.py``'s SAMPLES (variable -> where it lands, the text in .env, the
value expected; never the default)."""

from __future__ import annotations

from typing import Any

SUMMARY_SAMPLES: dict[str, tuple[tuple[str, ...], str, Any]] = {
    "CHORUS_SUMMARIES": (("memory.summaries_enabled",), "false", False),
    "CHORUS_SUMMARY_TTL_DAYS": (("memory.summary_ttl_days",), "7", 7),
    "CHORUS_SUMMARY_CHARS": (("memory.summary_chars",), "1200", 1200),
    "CHORUS_SUMMARY_THRESHOLD": (("memory.summary_threshold",), "0.3", 0.3),
    "CHORUS_SUMMARY_AFTER_LINES": (("memory.summary_after_lines",), "10", 10),
    "CHORUS_COMMUNITY_MEMORY": (("memory.community_memory",), "true", True),
    "CHORUS_COMMUNITY_CHARS": (("memory.community_chars",), "600", 600),
    "CHORUS_BACKGROUND_MODEL_DEADLINE": (("memory.background_deadline",), "30", 30.0),
}
