"""Named dashboard accounts: their roles, their passwords, and ``chorus admin add-user``.

Besides ``CHORUS_ADMIN_TOKEN`` (the bootstrap login, with every right), a deployment may give
people accounts of their own, each with a role: ``viewer`` reads every page, ``operator`` also
pauses channels and edits or forgets memory, ``admin`` also edits and reloads the
configuration. The audit trail names the account of each change.

Why scrypt (``hashlib.scrypt``, from the standard library's OpenSSL): a memory-hard KDF, so a
stolen record costs a guesser memory as well as time per guess; each hash has its own random
salt and carries its parameters, so they can be raised later without breaking old records.
The check runs in a worker thread (it takes tens of milliseconds by design) and compares in
constant time. Passwords come from a prompt or stdin, never from the command line (which other
users of the machine can read in the process list).
"""

from __future__ import annotations

import asyncio
import base64
import functools
import getpass
import hashlib
import hmac
import re
import secrets
import sys
from typing import TextIO

from bot.settings import ConfigError, Settings
from bot.state.admin_accounts import AccountRecords
from bot.state.connect import open_redis

ROLES = ("viewer", "operator", "admin")
RANK = {role: rank for rank, role in enumerate(ROLES)}
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
MIN_PASSWORD = 12
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**15, 8, 1  # 32 MiB of memory per hash
SCRYPT_MAXMEM = 64 * 1024 * 1024

# What each change needs (POST paths by prefix); every page (GET) needs only ``viewer``.
NEEDS = (
    ("/config", "admin"),
    ("/plugins", "admin"),
    ("/knowledge", "admin"),
    ("/chat", "operator"),
    ("/settings/reload", "admin"),
    ("/live/", "operator"),
    ("/moderation/", "operator"),
    ("/voice/", "operator"),
    ("/people/", "operator"),
    ("/commands", "operator"),
)


def needed(path: str) -> str:
    """The least role a POST to ``path`` needs (logging out needs none beyond a session)."""
    for prefix, role in NEEDS:
        if path.startswith(prefix):
            return role
    return "viewer"


def allows(role: str, need: str) -> bool:
    return RANK.get(role, -1) >= RANK[need]


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(
        password.encode(), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, maxmem=SCRYPT_MAXMEM
    )
    b64 = base64.b64encode
    return f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${b64(salt).decode()}${b64(digest).decode()}"


def password_ok(password: str, encoded: str) -> bool:
    """Whether ``password`` is the one ``encoded`` was made from (False for a malformed one)."""
    try:
        kind, n, r, p, salt, digest = encoded.split("$")
        if kind != "scrypt":
            return False
        expected = base64.b64decode(digest)
        found = hashlib.scrypt(
            password.encode(),
            salt=base64.b64decode(salt),
            n=int(n),
            r=int(r),
            p=int(p),
            maxmem=SCRYPT_MAXMEM,
            dklen=len(expected),
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(found, expected)


async def check_login(records: AccountRecords, name: str, password: str) -> str | None:
    """The account's role when ``password`` is its password; None otherwise (an unknown name
    costs the same hash as a wrong password, so timing tells no name apart)."""
    found = await records.get(name) if NAME.match(name) else None
    encoded = found[1] if found else _decoy()
    ok = await asyncio.to_thread(password_ok, password, encoded)
    return found[0] if ok and found else None


@functools.cache
def _decoy() -> str:
    return hash_password(secrets.token_hex(16))


def read_password(stdin: TextIO) -> str:
    """From a prompt (twice) on a terminal, else the first line of stdin."""
    if stdin.isatty():
        first = getpass.getpass("password: ")
        if getpass.getpass("again: ") != first:
            raise ValueError("the two passwords differ")
        return first
    return stdin.readline().rstrip("\r\n")


async def add_user(settings: Settings, name: str, role: str, password: str) -> None:
    if not NAME.match(name):
        raise ValueError(
            f"{name!r} is not an account name: 1 to 32 of a-z, 0-9, '_' and '-', "
            "starting with a letter or digit"
        )
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, got {role!r}")
    if len(password) < MIN_PASSWORD:
        raise ValueError(f"the password needs at least {MIN_PASSWORD} characters")
    if settings.state.redis_url.startswith("memory://"):
        raise ValueError(
            "accounts are kept in Redis, which this deployment does not use "
            "(CHORUS_REDIS_URL=memory://); set CHORUS_REDIS_URL=redis://... as the bot has it"
        )
    redis = await open_redis(settings.state.redis_url)
    try:
        records = AccountRecords(redis, namespace=settings.state.bus_namespace)
        await records.put(name, role, await asyncio.to_thread(hash_password, password))
    finally:
        await redis.aclose()


async def remove_user(settings: Settings, name: str) -> bool:
    redis = await open_redis(settings.state.redis_url)
    try:
        return await AccountRecords(redis, namespace=settings.state.bus_namespace).remove(name)
    finally:
        await redis.aclose()


def command(
    settings: Settings, action: str, name: str, role: str, stdin: TextIO = sys.stdin
) -> int:
    """``chorus admin add-user NAME --role ROLE`` (creates or replaces the account) and
    ``chorus admin remove-user NAME``."""
    try:
        if action == "remove-user":
            if not asyncio.run(remove_user(settings, name)):
                print(f"chorus: admin remove-user: no account {name!r}", file=sys.stderr)
                return 1
            print(f"account {name} removed; its sessions end at their next request")
            return 0
        password = read_password(stdin)
        asyncio.run(add_user(settings, name, role, password))
    except (ValueError, ConfigError) as exc:
        print(f"chorus: admin {action}: {exc}", file=sys.stderr)
        return 2
    print(f"account {name} ({role}) saved; it logs in on the dashboard with its password")
    return 0
