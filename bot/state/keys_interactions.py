"""The keys of slash-command answers routed between gateway processes (bot/state/interactions.py).

Built here rather than in ``keys.py`` (at its line limit), in the same format: ``PREFIX``, the
escaping of ids, and a hash tag in the cluster layout. A gateway process's inbox and its
liveness mark share that tag (one slot), since one transaction reads the mark and fills the
inbox. The interaction mark itself is ``keys.pending_interaction``.
"""

from __future__ import annotations

import re

from bot.state import keys

_PLATFORM = re.compile(r"^[a-z0-9_]+$")
_HOLDER = re.compile(r"^[a-z0-9]{1,64}$")


def _gateway(platform: str, holder: str) -> str:
    """``chorus:v1:gateway:<platform>:<holder>``, the holder's part as a hash tag on a cluster."""
    if not _PLATFORM.match(platform):
        raise ValueError(f"platform must match [a-z0-9_]+, got {platform!r}")
    if not _HOLDER.match(holder):
        raise ValueError(f"holder must match [a-z0-9]{{1,64}}, got {holder!r}")
    part = f"{platform}:{holder}"
    return f"{keys.PREFIX}:gateway:" + (f"{{{part}}}" if keys.cluster_layout() else part)


def interaction_inbox(platform: str, holder: str) -> str:
    """The list of answers other gateway processes forwarded to gateway process ``holder``."""
    return f"{_gateway(platform, holder)}:answers"


def gateway_alive(platform: str, holder: str) -> str:
    """Gateway process ``holder`` is reading its inbox (renewed while it does)."""
    return f"{_gateway(platform, holder)}:alive"
