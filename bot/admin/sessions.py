"""Ending dashboard sessions before their time, for every process of a deployment: a logout,
and a change of ``CHORUS_ADMIN_TOKEN``.

Why in Redis: a session is a signed cookie any process can check on its own, so deleting the
browser's copy at logout would leave a copied cookie valid until it expires. Both records
live where every process serving the dashboard reads them, checked on each request that
carries a session cookie (one ``MGET``):

- a logout writes ``chorus:v1:admin:revoked:{ns}:{session id}`` with the session's remaining
  life as its TTL, so the record lasts exactly as long as the cookie could;
- the token record ``chorus:v1:admin:token:{ns}`` holds a fingerprint of the token and the time
  it took effect. A process whose token differs from the record's, at start, writes its own
  with the time: every session issued before then is refused, by the processes still running
  the old token too (the key derived from the token already refuses old sessions in those
  with the new one). A first start writes time 0 (no session predates it); every login
  renews the record's TTL, so while any session can be alive the record is there.

The fingerprint is a signature of a constant made with a key derived from the token
(``Auth.signer``), cut short: enough to tell two tokens apart, not the token.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable

from bot.admin.auth import SESSION_SECONDS, Auth, Session
from bot.state.connect import Client
from bot.state.dashboard import SessionRecords

log = logging.getLogger("chorus.admin")

FINGERPRINT_CHARS = 16


class Sessions:
    """Revocation of dashboard sessions, shared in Redis by the deployment's processes."""

    def __init__(
        self,
        auth: Auth,
        redis: Client,
        *,
        namespace: str = "main",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.records = SessionRecords(redis, namespace=namespace)
        self.namespace = namespace
        self.clock = clock
        signature = auth.signer("fingerprint").get_signature(b"chorus-admin-token")
        self.fingerprint = signature.decode()[:FINGERPRINT_CHARS]

    async def started(self) -> None:
        """At start: record this process's token; if it differs from the deployment's, every
        session issued before now is refused from now on."""
        found = await self.records.token()
        if found is None:
            await self.records.set_token(f"{self.fingerprint} 0", SESSION_SECONDS)
        elif found.partition(" ")[0] != self.fingerprint:
            now = self.clock()
            await self.records.set_token(f"{self.fingerprint} {now!r}", SESSION_SECONDS)
            log.warning(
                "admin dashboard: CHORUS_ADMIN_TOKEN changed; every dashboard session issued "
                "before now is refused by every process"
            )

    async def issued(self) -> None:
        """A login: the token record lives at least as long as the new session."""
        await self.records.keep_token(f"{self.fingerprint} 0", SESSION_SECONDS)

    async def valid(self, session: Session) -> bool:
        """Whether a session with a good signature is still in force: not logged out, and
        issued after the deployment's token took effect."""
        revoked, record = await self.records.state(session.sid)
        if revoked:
            return False
        since = (record or "").partition(" ")[2]
        try:
            return session.issued >= float(since or 0)
        except ValueError:  # not a record this code wrote: refuse rather than guess
            return False

    async def revoke(self, session: Session) -> None:
        """A logout: refused everywhere for the rest of the session's life."""
        remaining = math.ceil((session.expires - self.clock()) * 1000)
        if remaining > 0:
            await self.records.revoke(session.sid, remaining)
