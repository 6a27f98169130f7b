"""The bus topics every component agrees on (events are JSON pydantic models, see events.py).

- ``inbound``: ``ChatMessage`` from every adapter, consumed by the router (agent workers);
- ``deletions``: ``MessageDeleted`` from adapters, applied to stored history by the router;
- ``outbound:<platform>``: ``Reply`` from the router, consumed by that platform's adapter;
- ``moderation:<platform>``: ``ModerationRequest`` (delete, timeout, ban...) from whoever
  decides, performed by the gateway that runs that platform's adapter;
- ``dead_letters``: ``DeadLetter``, an inbound message delivered too often without an answer
  (``CHORUS_MAX_DELIVERIES``), kept for an operator and never answered.
"""

from __future__ import annotations

INBOUND = "inbound"
DELETIONS = "deletions"
DEAD_LETTERS = "dead_letters"


def outbound_topic(platform: str) -> str:
    return f"outbound:{platform}"


def moderation_topic(platform: str) -> str:
    return f"moderation:{platform}"
