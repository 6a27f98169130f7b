"""The dashboard's named accounts, kept in Redis so every process serving it knows them.

The rules are ``bot.admin.accounts``'s (the roles, the password hash and its check); this module
keeps the records: one string per account (``keys.admin_account``: JSON with the role and the
hash, read with one ``GET`` per request of a session that names the account, so a removed
account or a changed role holds at once everywhere) and a set of the names to list them.
"""

from __future__ import annotations

import json

from bot.state import keys
from bot.state.connect import Client


class AccountRecords:
    def __init__(self, redis: Client, *, namespace: str = "main") -> None:
        self.redis = redis
        self.namespace = namespace

    async def put(self, name: str, role: str, password_hash: str) -> None:
        record = json.dumps({"role": role, "hash": password_hash})
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(keys.admin_account(name, self.namespace), record)
            pipe.sadd(keys.admin_accounts(self.namespace), name)
            await pipe.execute()

    async def get(self, name: str) -> tuple[str, str] | None:
        """The account's role and password hash; None: no such account."""
        raw = await self.redis.get(keys.admin_account(name, self.namespace))
        if not raw:
            return None
        try:
            found = json.loads(raw)
            return str(found["role"]), str(found["hash"])
        except (ValueError, KeyError, TypeError):
            return None  # not a record this code wrote: no account rather than a guess

    async def remove(self, name: str) -> bool:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(keys.admin_account(name, self.namespace))
            pipe.srem(keys.admin_accounts(self.namespace), name)
            deleted, _ = await pipe.execute()
        return bool(deleted)

    async def names(self) -> list[str]:
        found = await self.redis.smembers(keys.admin_accounts(self.namespace))
        return sorted(n.decode() if isinstance(n, bytes) else str(n) for n in found)
