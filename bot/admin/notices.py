"""What a page says after a change (``?notice=``): only what this server issued.

Why not the text in the URL: a notice is shown on the page in the dashboard's own voice, so a
link carrying free text (``/?notice=Your session expired, call ...``) would let anyone put
words in the dashboard's mouth. A notice is an id from ``NOTICES`` with the values its text
needs, serialised and signed with a key derived from the admin token (``itsdangerous``,
its own purpose), and valid for ``NOTICE_SECONDS``. The texts themselves are in
``prompts/admin/notices.html``, one per id; a ``?notice=`` that is not a signature this server
made, or names no known id, shows nothing.
"""

from __future__ import annotations

import hashlib
from typing import Any
from urllib.parse import quote

from itsdangerous import BadData, URLSafeTimedSerializer

# Each notice's id -> the values its text in prompts/admin/notices.html fills in.
NOTICES: dict[str, tuple[str, ...]] = {
    "pin_deleted": (),
    "pin_edited": (),
    "rec_deleted": (),
    "rec_edited": (),
    "stale": (),
    "invalid": ("reason",),
    "forgotten": ("summary",),
    "paused": ("channel",),
    "resumed": ("channel",),
    "twitch_joined": ("channel",),
    "twitch_left": ("channel",),
    "reloaded": (),
    "saved": (),
    "knowledge": ("text",),
    "command_saved": ("name",),
    "command_deleted": ("name",),
    "undone": ("action", "user"),
}
NOTICE_SECONDS = 600  # a notice is for the page right after the change


class Notices:
    """Issues and reads the signed notices of one admin token."""

    def __init__(self, token: str) -> None:
        self._serializer = URLSafeTimedSerializer(
            token,
            salt="chorus-admin-notice",
            signer_kwargs={"key_derivation": "hmac", "digest_method": hashlib.sha256},
        )

    def issue(self, notice: str, **values: str) -> str:
        """``?notice=...`` for a redirect's URL (already quoted)."""
        if notice not in NOTICES or set(values) != set(NOTICES[notice]):
            raise ValueError(f"no notice {notice!r} with values {sorted(values)}")
        return "notice=" + quote(self._serializer.dumps([notice, values]), safe="")

    def read(self, raw: str) -> dict[str, Any] | None:
        """The notice to show for ``?notice=raw`` (its id and values); None: nothing."""
        if not raw:
            return None
        try:
            found = self._serializer.loads(raw, max_age=NOTICE_SECONDS)
        except BadData:
            return None
        if not (isinstance(found, list) and len(found) == 2):
            return None
        notice, values = found
        if notice not in NOTICES or not isinstance(values, dict):
            return None
        if set(values) != set(NOTICES[notice]):
            return None
        return {"id": notice, **{name: str(values[name]) for name in NOTICES[notice]}}
