"""What the router itself says: the refusal of an over-long message and its two apologies.

Why apart from ``core``: every text a user reads lives in ``prompts/`` (here
``prompts/router/*``); these are the router's few, rendered in one place so the golden tests
and the router read the same words.
"""

from __future__ import annotations

import prompts


def too_long(length: int, limit: int) -> str:
    """The refusal of a message over ``CHORUS_MAX_MESSAGE_CHARS``."""
    return prompts.render("router/too_long", length=f"{length:,}", limit=f"{limit:,}")


def apology() -> str:
    """The reply when no model answered (after retries and fallbacks)."""
    return prompts.render("router/llm_unavailable")


def crash_apology() -> str:
    """The reply when answering failed for any other reason (a bug, logged)."""
    return prompts.render("router/crash")
