"""The gateway spool's place and signing key, and the outbox over it, from the settings.

Where: ``CHORUS_SPOOL_DIR`` under the data directory (``StateSettings.spool_path``: absolute,
never the working directory, so a gateway started from another directory neither misses its
spool nor replays one it finds there).

The key: every spooled record is signed with it (``bot.bus.spool``), so it must be the same for
every gateway sharing the directory and every restart of them, different between deployments,
and unknown to whoever can only write files into the directory. Like the system prompt's canary
(``bot.safety.canary``) it is derived, never stored beside the spool: an HMAC keyed by
``CHORUS_SPOOL_SECRET`` or, when that is unset, by the deployment's own secrets (model keys,
platform tokens, the Redis password: ``Settings.secret_values``), over the bus namespace. A
deployment with no secret at all gets a random key kept in ``spool.key`` in the data directory
(created once, mode 0600), with a warning. Rotating a secret the key is derived from makes the
files spooled before unverifiable (refused at the next start): set ``CHORUS_SPOOL_SECRET`` to
keep the key apart from the secrets it would otherwise follow.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
from pathlib import Path

from bot.bus.base import EventBus
from bot.bus.outbox import Outbox
from bot.bus.spool import Spool
from bot.settings import Settings

log = logging.getLogger("chorus.bus")

KEY_FILE = "spool.key"


def spool_key(settings: Settings) -> bytes:
    """The deployment's spool key (see the module docstring for where it comes from)."""
    state = settings.state
    if state.spool_secret is not None and state.spool_secret.get_secret_value():
        material = state.spool_secret.get_secret_value()
    elif known := sorted(set(settings.secret_values())):
        material = "|".join(known)
    else:
        material = stored_key(state.data_path() / KEY_FILE)
    label = f"chorus-spool:{state.bus_namespace}".encode()
    return hmac.new(material.encode(), label, hashlib.sha256).digest()


def stored_key(path: Path) -> str:
    """The random key kept in ``path``, created (mode 0600) when it does not exist yet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text(encoding="ascii").strip()
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(secrets.token_hex(32))
    log.warning(
        "no secret to derive the spool key from; a random key was stored (set "
        "CHORUS_SPOOL_SECRET to choose one)",
        extra={"path": str(path)},
    )
    return path.read_text(encoding="ascii").strip()


def gateway_spool(settings: Settings) -> Spool:
    """The gateway's spool: its absolute directory, key and retention of set-aside files."""
    state = settings.state
    return Spool(
        state.spool_path(),
        key=spool_key(settings),
        corrupt_retention=state.spool_corrupt_retention,
    )


def gateway_outbox(settings: Settings, bus: EventBus) -> Outbox:
    """The gateway's ordered outbox over the Redis Streams bus, spooling to its spool."""
    state = settings.state
    return Outbox(
        bus,
        spool=gateway_spool(settings),
        limit=state.outbox_limit,
        flush_seconds=state.outbox_flush_seconds,
    )
