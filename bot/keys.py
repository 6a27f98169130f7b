"""Every Redis key Chorus uses, built in this one module.

One format, one prefix, one place to look: a key built anywhere else is a bug. The version in
the prefix lets a future incompatible format live next to this one during a rolling deploy.
Ids coming from platforms may contain ``:`` (the separator), so each id is escaped the same way
``ConversationKey.__str__`` escapes channel and thread (``%`` -> ``%25``, ``:`` -> ``%3A``):
channel ``a:b`` and channel ``a`` + thread ``b`` can never share a key.

Keys (``{platform}`` is ``[a-z0-9_]+``; every other ``{...}`` part is escaped):

``chorus:v1:hist:{platform}:{channel}[:{thread}]`` -- list of JSON ``HistoryEntry``
    TTL CHORUS_HISTORY_TTL (default 7 days), refreshed by every append.
    Written by ``HistoryStore`` (bot/history.py).
``chorus:v1:user:{platform}:{user_id}:{kind}`` -- per-user value (``kind`` is ``[a-z0-9_]+``,
    e.g. ``pins``); TTL ``USER_TTL_SECONDS`` (30 days), refreshed by every write.
    Written by its owner (e.g. the insights worker).
``chorus:v1:dedupe:{platform}:{message_id}`` -- string ``claimed`` then ``done``
    TTL: claim 10 minutes, done 3 days (``RouterLimits``). Written by the router.

A history list holds JSON ``HistoryEntry`` values, oldest first, capped by CHORUS_HISTORY_MAX.
A user key belongs to a person, so it must always carry a TTL: whoever writes one sets it in the
same pipeline as the write. A dedupe key is ``SET NX`` by the router when it claims a message
(value ``claimed``) and overwritten with ``done`` after the answer, each with its own expiry.
"""

from __future__ import annotations

import re

from bot.events import ConversationKey
from bot.events import escape_key_part as _escape_part  # the one escaping rule

PREFIX = "chorus:v1"

# A per-user key (pins, recommendations...) outlives inactivity by this much, then Redis forgets it.
USER_TTL_SECONDS = 30 * 24 * 3600

_TOKEN = re.compile(r"^[a-z0-9_]+$")


def history(conv: ConversationKey) -> str:
    """The list of one conversation's history (a thread is its own conversation)."""
    return f"{PREFIX}:hist:{conv}"


def user(platform: str, user_id: str, kind: str) -> str:
    """A per-user value of ``kind`` (e.g. ``pins``); identity is the platform's user id."""
    _check_token("platform", platform)
    _check_token("kind", kind)
    _check_id("user_id", user_id)
    return f"{PREFIX}:user:{platform}:{_escape_part(user_id)}:{kind}"


def dedupe(platform: str, message_id: str) -> str:
    """The claim/done marker of one platform message, for at-least-once delivery."""
    _check_token("platform", platform)
    _check_id("message_id", message_id)
    return f"{PREFIX}:dedupe:{platform}:{_escape_part(message_id)}"


def _check_token(name: str, value: str) -> None:
    if not _TOKEN.match(value):
        raise ValueError(f"{name} must match [a-z0-9_]+, got {value!r}")


def _check_id(name: str, value: str) -> None:
    if not value:
        raise ValueError(f"{name} must not be empty")
