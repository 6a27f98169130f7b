"""The dashboard's defences in two real ``chorus run --role worker`` processes of one deployment
(the Redis Streams bus and the dashboard state in a real Redis), over real HTTP.

Process A binds ``0.0.0.0`` with no trusted proxy: it warns at start, and believes no
``X-Forwarded-For``. Process B binds ``0.0.0.0`` behind a trusted proxy (this test, on
127.0.0.1, listed in ``CHORUS_ADMIN_TRUST_PROXY``): no warning, and its login limit counts per
real client. A session logged out in A is refused in B too (a copied cookie); a notice in the
URL is never shown; 30 concurrent wrong Bearer tokens are compared at most 5 times (each
compare is a 401, each refusal before the compare a 429) in each process, and the holder of the
right token at another address gets in at once.
"""

from __future__ import annotations

import asyncio
import re
import signal
from collections import Counter
from pathlib import Path

import aiohttp

from bot.admin.auth import COOKIE
from bot.admin.login import LOGIN_FAILURES
from tests.redis_server import free_port
from tests.test_chat_e2e import ROOT, spawn_chorus
from tests.test_worker_takeover_e2e import worker_env

TOKEN = "e2e-admin-token-0123456789abcdef"
LIMIT = 90.0  # generous: a loaded 2-core machine; each wait ends as soon as its event happens
ATTACKER, HOLDER = "203.0.113.7", "198.51.100.7"  # documentation addresses (RFC 5737)
INJECTED = "Your session expired. Call +1 555 0100 to log in again"
WARNING = "reachable from the network over plain HTTP with no trusted proxy"


async def up(http: aiohttp.ClientSession, base: str) -> None:
    """Wait until the process serves its login page."""
    async with asyncio.timeout(LIMIT):
        while True:
            try:
                async with http.get(f"{base}/login") as page:
                    if page.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)  # another process starting: a modest poll


async def log_in(http: aiohttp.ClientSession, base: str) -> tuple[str, str]:
    """Log in through the form: the session cookie and the session's CSRF token."""
    async with http.get(f"{base}/login") as page:
        found = re.search(r'name="csrf" value="([^"]+)"', await page.text())
    assert found is not None
    form = {"token": TOKEN, "csrf": found.group(1)}
    async with http.post(f"{base}/login", data=form, allow_redirects=False) as done:
        assert done.status == 303
        cookie = done.cookies[COOKIE].value
    async with http.get(f"{base}/settings") as page:
        csrf = re.search(r'name="csrf" value="([\w-]+)"', await page.text())
    assert csrf is not None
    return cookie, csrf.group(1)


async def with_cookie(base: str, cookie: str) -> int:
    """What a copy of ``cookie``, sent from a browser of its own, gets."""
    async with (
        aiohttp.ClientSession() as thief,
        thief.get(
            f"{base}/", headers={"Cookie": f"{COOKIE}={cookie}"}, allow_redirects=False
        ) as page,
    ):
        return page.status


async def guesses(base: str, forwarded: list[str]) -> Counter[int]:
    """Wrong Bearer tokens sent at once, one per ``X-Forwarded-For`` value ("": none)."""
    async with aiohttp.ClientSession() as http:

        async def guess(n: int, hop: str) -> int:
            headers = {"Authorization": f"Bearer guess-{n}"} | (
                {"X-Forwarded-For": hop} if hop else {}
            )
            async with http.get(f"{base}/live", headers=headers) as response:
                return response.status

        return Counter(await asyncio.gather(*(guess(n, h) for n, h in enumerate(forwarded))))


async def bearer(base: str, client: str) -> int:
    headers = {"Authorization": f"Bearer {TOKEN}", "X-Forwarded-For": client}
    async with aiohttp.ClientSession() as http, http.get(f"{base}/live", headers=headers) as page:
        return page.status


async def test_two_processes_share_logouts_and_hold_the_limit(
    real_redis_url: str, key_tag: str, tmp_path: Path
) -> None:
    ports = free_port(), free_port()
    base_a, base_b = (f"http://127.0.0.1:{port}" for port in ports)
    env = worker_env(tmp_path, real_redis_url, key_tag, "http://127.0.0.1:9")  # never called
    env |= {"CHORUS_ADMIN_TOKEN": TOKEN, "CHORUS_ADMIN_HOST": "0.0.0.0"}
    proc_a = await spawn_chorus(
        ["run", "--role", "worker"], env | {"CHORUS_ADMIN_PORT": str(ports[0])}, ROOT
    )
    env_b = env | {"CHORUS_ADMIN_PORT": str(ports[1]), "CHORUS_ADMIN_TRUST_PROXY": "127.0.0.1"}
    proc_b = await spawn_chorus(["run", "--role", "worker"], env_b, ROOT)
    try:
        jar = aiohttp.CookieJar(unsafe=True)  # cookies for an address, not a name
        async with aiohttp.ClientSession(cookie_jar=jar) as http:
            await up(http, base_a)
            await up(http, base_b)
            cookie, csrf = await log_in(http, base_a)
            assert await with_cookie(base_b, cookie) == 200  # one deployment, one session
            async with http.post(
                f"{base_a}/logout", data={"csrf": csrf}, allow_redirects=False
            ) as out:
                assert out.status == 303
            assert await with_cookie(base_b, cookie) == 303  # logged out everywhere
            assert await with_cookie(base_a, cookie) == 303
            headers = {"Authorization": f"Bearer {TOKEN}"}
            query = {"notice": INJECTED}
            async with http.get(f"{base_a}/", params=query, headers=headers) as page:
                assert page.status == 200 and INJECTED not in await page.text()

        # B, behind its trusted proxy: the attacker's guesses block the attacker only.
        statuses = await guesses(base_b, [f"{ATTACKER}, 127.0.0.1"] * 30)
        assert statuses[401] <= LOGIN_FAILURES and sum(statuses.values()) == 30
        assert statuses == {401: statuses[401], 429: 30 - statuses[401]}
        assert await bearer(base_b, ATTACKER) == 429
        assert await bearer(base_b, HOLDER) == 200
        # A believes no X-Forwarded-For: a fresh spoofed address per guess changes nothing.
        statuses = await guesses(base_a, [f"192.0.2.{n}" for n in range(30)])
        assert statuses[401] <= LOGIN_FAILURES and statuses[429] == 30 - statuses[401]
        assert await bearer(base_a, HOLDER) == 429  # the peer is blocked, whatever it claims
    finally:
        logs: list[tuple[int | None, str]] = []
        for proc in (proc_a, proc_b):
            proc.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(proc.communicate(), 60)
            logs.append((proc.returncode, stderr.decode()))
    for code, log in logs:
        assert code == 0, log[-3000:]
        assert TOKEN not in log
    assert WARNING in logs[0][1] and "CHORUS_ADMIN_TRUST_PROXY" in logs[0][1]
    assert WARNING not in logs[1][1]
