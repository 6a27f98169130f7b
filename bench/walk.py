"""How many of Chorus's files one Discord mention walks through, from the adapter to the reply.

A reader following one message through the code opens every file its calls go into; each time
the path comes back to a file it had left, the reader jumps back. This counts both, on a real
run: an in-process Chorus (embedded store, in-process bus, scripted model) with the real
discord.py adapter against the loopback gateway, one warm-up mention (imports, caches, the
first connection), then a traced one, from the gateway's ``MESSAGE_CREATE`` to the reply's
``POST``. ``sys.setprofile`` sees every Python call; only Chorus's own files (``bot/``,
``adapters/``) count.

- **files**: distinct Chorus files a function of which ran for the mention;
- **calls across files**: distinct (caller's file, callee's file) pairs of Chorus's own;
- **back and forth**: pairs of files that call each other (A calls into B and B back into A:
  what a reader follows down and then back up again, the shape of a helper module that calls
  its caller's private methods);
- **climbs back up**: calls from a lower layer into a higher one (``tests/test_layering.py``'s
  table: the callee's package may import the caller's, not the other way round), which only a
  callback handed down makes: a reader in the lower module must go back up to find what runs.

The same counts are taken for the router's turn alone (calls made with a router function on the
stack: the stages and what they call, not the adapter's receiving and sending).

Other tasks of the process may run inside the window (the router's one-second tick); the
lowest of ``RUNS`` runs is reported. Run: ``python -m bench.walk``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OURS = tuple(str(ROOT / part) + "/" for part in ("bot", "adapters"))
RUNS = 3


ROUTER = str(ROOT / "bot" / "router") + "/"


@dataclass
class Walk:
    turn_only: bool = False  # count only calls made under the router's turn
    files: list[str] = field(default_factory=list)  # in the order first entered
    edges: set[tuple[str, str]] = field(default_factory=set)  # (caller's file, callee's file)
    climbs: int = 0  # calls against the layering

    def call(self, frame: FrameType) -> None:
        callee = _ours(frame)
        if callee is None or (self.turn_only and not _in_turn(frame)):
            return
        if callee not in self.files:
            self.files.append(callee)
        caller, up = None, frame.f_back
        for _ in range(4):  # the nearest of our frames above (through a library's, if any)
            if up is None:
                break
            caller = _ours(up)
            if caller is not None:
                break
            up = up.f_back
        if caller is not None and caller != callee:
            self.edges.add((caller, callee))
            if _above(callee, caller):
                self.climbs += 1

    @property
    def back_and_forth(self) -> list[tuple[str, str]]:
        return sorted((a, b) for a, b in self.edges if a < b and (b, a) in self.edges)


def _unit(path: str) -> str:
    """A file's layer, as ``tests/test_layering.py`` names it."""
    parts = path.removesuffix(".py").split("/")
    if parts[0] != "bot":
        return parts[0]
    return ".".join(parts[:2]) if len(parts) > 2 else "bot." + parts[1]


def _above(callee: str, caller: str) -> bool:
    """Whether ``callee``'s layer sits above ``caller``'s (it may import it, not vice versa)."""
    from tests.test_layering import MAY_IMPORT

    high, low = _unit(callee), _unit(caller)
    return (
        high != low
        and low in MAY_IMPORT.get(high, set())
        and high not in MAY_IMPORT.get(low, set())
    )


def _in_turn(frame: FrameType) -> bool:
    """Whether a router function is on the stack: a call the router's turn made (its own
    tasks included, such as the shielded commit), not one of the adapter's."""
    up: FrameType | None = frame
    while up is not None:
        if up.f_code.co_filename.startswith(ROUTER):
            return True
        up = up.f_back
    return False


def _ours(frame: FrameType) -> str | None:
    filename = frame.f_code.co_filename
    if not filename.startswith(OURS):
        return None
    return str(Path(filename).relative_to(ROOT))


async def _walk_once() -> tuple[Walk, Walk]:
    from adapters.discord.adapter import DiscordAdapter
    from bot.app import Chorus
    from bot.llm.scripted import ScriptedProvider
    from bot.settings import DiscordSettings, settings_from
    from tests.discord_rig import TOKEN, mention
    from tests.loopback.discord_server import CHANNEL_ID, DiscordServer

    settings = settings_from(
        {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "bench",
            "CHORUS_REDIS_URL": f"memory://walk-{uuid.uuid4().hex[:8]}",
            "CHORUS_INSIGHTS_ENABLED": "false",
        }
    )
    walk, turn = Walk(), Walk(turn_only=True)
    async with DiscordServer() as server:
        app = await Chorus.from_settings(settings, provider=ScriptedProvider())
        discord = DiscordSettings(
            DISCORD_TOKEN=TOKEN,  # type: ignore[call-arg]
            DISCORD_API_BASE_URL=server.api_url,
            DISCORD_GATEWAY_URL=server.ws_url,
        )
        adapter = DiscordAdapter(
            app.ingress_bus, discord, client_options={"guild_ready_timeout": 0.01}
        )
        runner = asyncio.create_task(adapter.run())
        try:
            await app.start()
            await server.wait_op(2)
            posts = f"/channels/{CHANNEL_ID}/messages"

            def posted(count: int) -> Callable[[], bool]:
                return lambda: len(server.requests_to("POST", posts)) >= count

            await server.dispatch("MESSAGE_CREATE", mention(900_001, "warm up"))
            await server.wait_for(posted(1), limit=60)

            def profile(frame: FrameType, event: str, arg: Any) -> None:
                if event == "call":
                    walk.call(frame)
                    turn.call(frame)

            sys.setprofile(profile)
            try:
                await server.dispatch("MESSAGE_CREATE", mention(900_002, "hello there"))
                await server.wait_for(posted(2), limit=60)
            finally:
                sys.setprofile(None)
        finally:
            await adapter.aclose()
            runner.cancel()
            await asyncio.gather(runner, return_exceptions=True)
            await app.aclose()
    return walk, turn


async def measure(runs: int = RUNS) -> tuple[Walk, Walk]:
    """The walks (adapter to reply, the router's turn) with the fewest files of ``runs``."""
    walks = [await _walk_once() for _ in range(runs)]
    return min(walks, key=lambda w: (len(w[0].files), len(w[0].edges)))


def _row(what: str, walk: Walk) -> str:
    return (
        f"| {what} | {len(walk.files)} | {len(walk.edges)} | {len(walk.back_and_forth)} "
        f"| {walk.climbs} |"
    )


async def main() -> list[str]:
    walk, turn = await measure()
    lines = [
        "## One Discord mention: the files it walks through",
        "",
        "| walk | files | calls across files | back and forth | climbs back up |",
        "|---|---|---|---|---|",
        _row("adapter to reply", walk),
        _row("the router's turn", turn),
        "",
        "Files, in the order first entered: " + ", ".join(f"`{f}`" for f in walk.files),
        "",
        "Back and forth: " + ", ".join(f"`{a}` <-> `{b}`" for a, b in walk.back_and_forth),
    ]
    return lines


if __name__ == "__main__":
    from bot.llm.guard import block_real_calls

    block_real_calls()
    logging.disable(logging.WARNING)
    print("\n".join(asyncio.run(main())))
