"""The Moderation page: the recent moderation actions on the platforms, and their undo.

What it lists is the audit trail's ``act`` entries (every action the gateway performed or tried,
whoever asked: the ``moderation`` plugin's filters, a moderator), newest first, and the
channels where the bot lacks a permission (the first ``missing_permission`` of each, with what
the platform said to grant), so an operator sees the gap once rather than per message.

A timeout or a ban that was done can be undone (role ``operator``): the undo is a
``ModerationRequest`` (``untimeout``, ``unban``) handed to the platform's gateway the way the
plugin's are (``Sources.moderate``), performed through the platform's API and audited itself,
with the dashboard account as its actor. A row already lifted (a later ``untimeout`` or
``unban`` of the same user there that was done) offers no undo.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bot.admin.views import Sources
from bot.events import ConversationKey, ModerationRequest
from bot.safety.audit import AuditEntry, read_audit

SCANNED, SHOWN = 1000, 200
UNDO = {"timeout": "untimeout", "ban": "unban"}


def _lifted(entries: list[AuditEntry]) -> set[tuple[str, str, int]]:
    """(conversation, user, at_ms) of every done timeout or ban lifted by a later undo."""
    lifted = set()
    for index, entry in enumerate(entries):
        if entry.rule not in UNDO or entry.action != "done":
            continue
        for later in entries[index + 1 :]:
            same = (later.conversation, later.user_id) == (entry.conversation, entry.user_id)
            if same and later.rule == UNDO[entry.rule] and later.action == "done":
                lifted.add((entry.conversation, entry.user_id, entry.at_ms))
                break
    return lifted


async def moderation(src: Sources) -> dict[str, Any]:
    """The page's rows (newest first) and the permission gaps."""
    found = await read_audit(src.redis, namespace=src.audit.namespace, count=SCANNED)
    acts = [entry for entry in found if entry.direction == "act"]  # oldest first
    lifted = _lifted(acts)
    rows, gaps, seen = [], [], set()
    for entry in reversed(acts):
        key = (entry.conversation, entry.user_id, entry.at_ms)
        undo = ""
        if entry.rule in UNDO and entry.action == "done" and key not in lifted:
            undo = UNDO[entry.rule]
        rows.append({"entry": entry, "undo": undo, "lifted": key in lifted})
        where = (entry.conversation, entry.rule)
        if entry.action == "missing_permission" and where not in seen:
            seen.add(where)
            gaps.append(entry)
        if len(rows) >= SHOWN:
            break
    return {"rows": rows, "gaps": gaps, "can_act": src.moderate is not None}


async def undo(src: Sources, form: Mapping[str, str], actor: str) -> ModerationRequest:
    """Hand the undo of one row (``action``, ``conversation``, ``user_id``) to its gateway."""
    if src.moderate is None:
        raise LookupError("this process cannot reach the platforms' gateways")
    action = form.get("action", "")
    if action not in UNDO.values():
        raise ValueError("action must be untimeout or unban")
    conversation = ConversationKey.parse(form.get("conversation", ""))
    request = ModerationRequest(
        conversation=conversation,
        action=action,  # type: ignore[arg-type]  # checked against UNDO above
        user_id=form.get("user_id", "") or None,
        reason=f"undone on the dashboard by {actor}",
        actor=actor,
    )
    await src.moderate(request)
    return request
