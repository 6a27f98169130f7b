"""The adapter supervisor (bot/platform/supervisor.py) with in-memory adapters whose ``run`` does
what the test scripts: crash, finish, fail on configuration, or run until closed. The backoff's
sleep and the clock are injected, so no test waits."""

from __future__ import annotations

import asyncio

import pytest

from bot.platform.protocol import PlatformAdapter
from bot.platform.supervisor import Slot, State, Supervisor
from bot.resilience import RetryPolicy
from bot.settings import ConfigError
from tests.waiting import until

POLICY = RetryPolicy(base_delay=1.0, max_delay=8.0, jitter=0.0)  # exact delays: 1, 2, 4, 8, 8


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Scripted:
    """An adapter whose ``run`` does the next thing its platform's script says."""

    def __init__(
        self, platform: str, outcome: str, log: list[str], clock: Clock | None = None
    ) -> None:
        self.platform = platform
        self.clock = clock
        self.outcome = outcome
        self.log = log
        self.closed = asyncio.Event()

    async def run(self) -> None:
        self.log.append(f"{self.platform}:{self.outcome}")
        if self.outcome == "crash":
            raise RuntimeError("the socket went away")
        if self.outcome == "crash-late":  # after a minute and more of good service
            assert self.clock is not None
            self.clock.now += 61.0
            raise RuntimeError("the socket went away")
        if self.outcome == "config":
            raise ConfigError("DISCORD_TOKEN was rejected; reset it in the developer portal")
        if self.outcome == "finish":
            return
        await self.closed.wait()  # "run": until aclose

    async def aclose(self) -> None:
        self.closed.set()


def slot(platform: str, outcomes: list[str], log: list[str], clock: Clock | None = None) -> Slot:
    """A slot whose successive adapters follow ``outcomes`` (the last one repeats)."""
    script = list(outcomes)

    def build() -> PlatformAdapter:
        outcome = script.pop(0) if len(script) > 1 else script[0]
        return Scripted(platform, outcome, log, clock)

    return Slot(adapter=build(), build=build)


def supervisor(slots: list[Slot], sleeps: list[float], clock: Clock | None = None) -> Supervisor:
    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        await asyncio.sleep(0)

    return Supervisor(
        slots,
        policy=POLICY,
        sleep=sleep,
        clock=clock if clock is not None else Clock(),
        healthy_after=60.0,
    )


async def test_a_crashing_adapter_is_rebuilt_with_growing_backoff_and_the_other_keeps_running() -> (
    None
):
    log: list[str] = []
    sleeps: list[float] = []
    youtube = slot("youtube", ["crash", "crash", "crash", "run"], log)
    discord = slot("discord", ["run"], log)
    first = youtube.adapter
    sup = supervisor([youtube, discord], sleeps)
    task = asyncio.create_task(sup.run())
    await until(lambda: youtube.restarts == 3 and youtube.state is State.RUNNING, every=0)
    assert sleeps == [1.0, 2.0, 4.0]
    assert youtube.adapter is not first and isinstance(first, Scripted) and first.closed.is_set()
    assert log.count("discord:run") == 1 and discord.state is State.RUNNING
    assert await youtube.ready() and await discord.ready()
    await sup.aclose()
    await asyncio.wait_for(task, 5) if not task.done() else None
    assert log.count("discord:run") == 1  # closing is not a reason to restart anything


async def test_a_finished_adapter_is_restarted_so_it_finds_the_next_broadcast() -> None:
    log: list[str] = []
    sleeps: list[float] = []
    youtube = slot("youtube", ["finish", "run"], log)
    sup = supervisor([youtube], sleeps)
    task = asyncio.create_task(sup.run())
    await until(lambda: log == ["youtube:finish", "youtube:run"], every=0)
    assert youtube.restarts == 1 and sleeps == [1.0]
    await sup.aclose()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_the_backoff_starts_over_after_a_healthy_run() -> None:
    log: list[str] = []
    sleeps: list[float] = []
    clock = Clock()
    twitch = slot("twitch", ["crash", "crash", "crash-late", "crash", "run"], log, clock)
    sup = supervisor([twitch], sleeps, clock)
    task = asyncio.create_task(sup.run())
    await until(lambda: twitch.restarts == 4, every=0)
    assert sleeps == [1.0, 2.0, 1.0, 2.0]  # the third crash came after a healthy minute
    await sup.aclose()
    await asyncio.wait_for(task, 5)


async def test_a_misconfigured_adapter_fails_alone_and_says_why_on_readiness() -> None:
    log: list[str] = []
    sleeps: list[float] = []
    discord = slot("discord", ["config"], log)
    slack = slot("slack", ["run"], log)
    sup = supervisor([discord, slack], sleeps)
    task = asyncio.create_task(sup.run())
    await until(lambda: discord.state is State.FAILED, every=0)
    await asyncio.sleep(0)
    assert log.count("discord:config") == 1 and sleeps == []  # never retried
    assert discord.error is not None and "DISCORD_TOKEN" in discord.error
    assert not await discord.ready() and await slack.ready()
    assert not task.done()
    await sup.aclose()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


async def test_when_every_adapter_fails_the_process_stops_with_each_reason() -> None:
    log: list[str] = []
    sup = supervisor([slot("discord", ["config"], log), slot("twitch", ["config"], log)], [])
    with pytest.raises(
        ConfigError, match=r"(?s)every platform adapter failed.*discord: .*twitch: "
    ):
        await asyncio.wait_for(sup.run(), 5)


async def test_readiness_follows_the_adapters_own_connection_state() -> None:
    class Connected(Scripted):
        connected = False

        async def ready(self) -> bool:
            return self.connected

    adapter = Connected("slack", "run", [])
    slot_ = Slot(adapter=adapter, build=lambda: adapter)
    assert not await slot_.ready()
    adapter.connected = True
    assert await slot_.ready()
    slot_.state = State.RESTARTING
    assert not await slot_.ready()


async def test_an_adapter_waiting_to_restart_when_the_process_stops_is_not_rebuilt() -> None:
    """A stop that lands during the backoff ends the slot: an adapter built after ``aclose``
    would run with nobody left to close it, and keep the process from ending."""
    log: list[str] = []
    waiting, release = asyncio.Event(), asyncio.Event()

    async def sleep(seconds: float) -> None:
        waiting.set()
        await release.wait()

    youtube = slot("youtube", ["finish", "run"], log)
    sup = Supervisor([youtube], policy=POLICY, sleep=sleep, clock=Clock())
    task = asyncio.create_task(sup.run())
    await asyncio.wait_for(waiting.wait(), 5)
    await sup.aclose()
    release.set()
    await asyncio.wait_for(task, 5)  # returns by itself: nothing left running
    assert log == ["youtube:finish"] and youtube.restarts == 0


class Sharded:
    """An adapter of two parts (shards) whose ``parts()`` the test sets; it runs until closed."""

    platform = "discord"

    def __init__(self) -> None:
        self.up = {"shard:0": True, "shard:1": True}
        self.restarted: list[str] = []
        self.runs = 0
        self.closed = asyncio.Event()
        self.restarted_one = asyncio.Event()

    async def run(self) -> None:
        self.runs += 1
        await self.closed.wait()

    async def aclose(self) -> None:
        self.closed.set()

    def expected_parts(self) -> list[str]:
        return list(self.up)

    def parts(self) -> dict[str, bool]:
        return dict(self.up)

    async def part_ready(self, name: str) -> bool:
        return self.up[name]

    async def restart_part(self, name: str) -> None:
        self.restarted.append(name)
        self.up[name] = True  # the part came back
        self.restarted_one.set()


async def test_a_part_down_past_its_grace_is_restarted_alone() -> None:
    """Shard 1 stays down: after the grace, only shard 1 is restarted; the adapter keeps running
    (its run is never restarted) and shard 0 is never touched."""
    clock = Clock()
    adapter = Sharded()
    looks = asyncio.Event()

    async def sleep(seconds: float) -> None:
        clock.now += seconds
        looks.set()
        await asyncio.sleep(0)

    made = Slot(adapter=adapter, build=lambda: adapter)
    sup = Supervisor([made], sleep=sleep, clock=clock, part_grace=30.0, part_every=10.0)
    running = asyncio.create_task(sup.run())
    await looks.wait()
    adapter.up["shard:1"] = False
    assert not await made.part_ready("shard:1") and await made.part_ready("shard:0")
    async with asyncio.timeout(10):
        await adapter.restarted_one.wait()
    await sup.aclose()
    await running
    assert adapter.restarted == ["shard:1"]
    assert made.part_restarts == {"shard:1": 1}
    assert adapter.runs == 1 and made.restarts == 0, "the adapter itself was not restarted"
    assert made.part_names() == ["shard:0", "shard:1"]


async def test_a_part_that_comes_back_within_its_grace_is_left_alone() -> None:
    clock = Clock()
    adapter = Sharded()
    looked = 0
    enough = asyncio.Event()

    async def sleep(seconds: float) -> None:
        nonlocal looked
        clock.now += seconds
        looked += 1
        adapter.up["shard:1"] = looked % 2 == 0  # down, up, down, up...: never 30 s in a row
        if looked >= 20:
            enough.set()
        await asyncio.sleep(0)

    made = Slot(adapter=adapter, build=lambda: adapter)
    sup = Supervisor([made], sleep=sleep, clock=clock, part_grace=30.0, part_every=10.0)
    running = asyncio.create_task(sup.run())
    async with asyncio.timeout(10):
        await enough.wait()
    await sup.aclose()
    await running
    assert adapter.restarted == [] and made.part_restarts == {}
