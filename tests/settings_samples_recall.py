"""Samples of the semantic recall, knowledge-base and admin-dashboard variables for
``tests/test_settings_sources.py``'s SAMPLES (variable -> where it lands, the text in .env, the
value expected; never the default)."""

from __future__ import annotations

from typing import Any

RECALL_SAMPLES: dict[str, tuple[tuple[str, ...], str, Any]] = {
    "CHORUS_EMBEDDING_MODEL": (
        ("memory.embedding_model",),
        "openai:text-embedding-3-small",
        "openai:text-embedding-3-small",
    ),
    "CHORUS_EMBEDDING_DIMENSIONS": (("memory.embedding_dimensions",), "512", 512),
    "CHORUS_EMBEDDING_DEADLINE": (("memory.embedding_deadline",), "0.5", 0.5),
    "CHORUS_EMBEDDING_TIMEOUT": (("memory.embedding_timeout",), "15", 15.0),
    "CHORUS_RECALL_WEIGHT": (("memory.recall_weight",), "0.6", 0.6),
    "CHORUS_RECALL_FLOOR": (("memory.recall_floor",), "0.25", 0.25),
    "CHORUS_RECALL_THRESHOLD": (("memory.recall_threshold",), "0.2", 0.2),
    "CHORUS_KNOWLEDGE_PATHS": (
        ("memory.knowledge_sources",),
        "docs/rules.md, https://example.org/faq",
        ("docs/rules.md", "https://example.org/faq"),
    ),
    "CHORUS_KNOWLEDGE_CHARS": (("memory.knowledge_chars",), "900", 900),
    "CHORUS_KNOWLEDGE_CHUNK_CHARS": (("memory.knowledge_chunk_chars",), "800", 800),
    "CHORUS_KNOWLEDGE_REFRESH": (("memory.knowledge_refresh",), "60", 60.0),
    "CHORUS_KNOWLEDGE_FOLLOW_SYMLINKS": (("memory.knowledge_follow_symlinks",), "true", True),
    "CHORUS_KNOWLEDGE_MAX_FILES": (("memory.knowledge_max_files",), "200", 200),
    "CHORUS_KNOWLEDGE_MAX_BYTES": (("memory.knowledge_max_bytes",), "5000000", 5_000_000),
    "CHORUS_KNOWLEDGE_PDF_TIMEOUT": (("memory.knowledge_pdf_timeout",), "7.5", 7.5),
    "CHORUS_KNOWLEDGE_FETCH_ALLOW": (
        ("memory.knowledge_fetch_allow",),
        "wiki.internal:8443, 10.1.0.0/16",
        frozenset({"wiki.internal:8443", "10.1.0.0/16"}),
    ),
}

# The admin dashboard's settings (bot/settings: ``admin``).
ADMIN_SAMPLES: dict[str, tuple[tuple[str, ...], str, Any]] = {
    "CHORUS_ADMIN_PORT": (("admin.port",), "8470\nCHORUS_ADMIN_TOKEN=a-long-admin-token", 8470),
    "CHORUS_ADMIN_HOST": (("admin.host",), "0.0.0.0", "0.0.0.0"),
    "CHORUS_ADMIN_TOKEN": (("admin.token",), "a-long-admin-token-123", "a-long-admin-token-123"),
    "CHORUS_ADMIN_TRUST_PROXY": (
        ("admin.trust_proxy",),
        "127.0.0.1, 10.0.0.0/8",
        ("127.0.0.1/32", "10.0.0.0/8"),
    ),
}
