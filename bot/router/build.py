"""Wiring a router: each stage from the parts it needs, and the router over them.

The composition root (``bot.app``) and the tests build routers here, so the stages' wiring is
written once: which store the turns use (a ``RedisTurnStore`` over ``redis`` unless one is
given; its live channels are the engagement's own store), who shares the turn log, the safety
gate and the claims.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.agent.loop import Agent
from bot.agent.prompting import PromptAssembler
from bot.bus.base import EventBus
from bot.engagement.turns import LiveChat
from bot.memory.buffers import MemoryStore
from bot.memory.recall import Recall
from bot.ops.metrics import MetricsSink, NullMetrics
from bot.plugins.runtime import TurnHooks
from bot.router.admit import Admit
from bot.router.answer import Answer
from bot.router.commit import Commit
from bot.router.core import Router, Stages
from bot.router.decide import Decide
from bot.router.drafts import Drafts
from bot.router.observe import TurnObserver
from bot.router.read import Read
from bot.router.scoping import FixedScoping, Scoping
from bot.router.screen import Screen
from bot.router.text_commands import Commands
from bot.router.turn import RouterLimits
from bot.safety.gate import SafetyGate
from bot.state.claims import Claims, default_worker_id
from bot.state.connect import Client
from bot.state.engagement import MemoryLiveStore, RedisLiveStore
from bot.state.history import HistoryStore
from bot.state.redis_turn import RedisTurnStore
from bot.state.turn import TurnStore
from bot.state.turnlog import TurnLog
from bot.tools.toolbox import Toolbox

if TYPE_CHECKING:  # the overlay's voice is imported only where it is on (bot.app)
    from bot.voice.speaker import Speaker


def build_router(
    *,
    bus: EventBus,
    commands: Commands,
    history: HistoryStore | None = None,
    redis: Client | None = None,
    store: TurnStore | None = None,
    assembler: PromptAssembler | None = None,
    agent: Agent | None = None,
    scoping: Scoping | FixedScoping | None = None,
    tools: Toolbox | None = None,
    memory: MemoryStore | None = None,
    limits: RouterLimits | None = None,
    worker_id: str | None = None,
    engagement: LiveChat | None = None,
    metrics: MetricsSink | None = None,
    hooks: TurnHooks | None = None,
    safety: SafetyGate | None = None,
    recall: Recall | None = None,
    drafts: Drafts | None = None,
    observer: TurnObserver | None = None,
    speaker: Speaker | None = None,
) -> Router:
    """A router over ``store`` (or a ``RedisTurnStore`` over ``redis`` and ``history``).
    ``scoping``: each message's profile from chorus.toml's scopes; without it every message
    gets ``assembler``, ``agent`` and the reasoning of ``limits``. Without ``redis`` the turn
    log is kept in memory only and deletions are applied only with ``history``."""
    limits = limits or RouterLimits()
    metrics = metrics or NullMetrics()
    safety = safety or SafetyGate()
    if store is None:
        if redis is None or history is None:
            raise ValueError("build_router needs a turn store, or a Redis client and a history")
        store = RedisTurnStore(redis, history=history, channels=_channels(engagement, redis))
    if scoping is None:
        if assembler is None or agent is None:
            raise ValueError("build_router needs scoping, or an assembler and an agent")
        scoping = FixedScoping.of(assembler, agent, limits)
    observer = observer or TurnObserver(TurnLog(redis) if redis is not None else None)
    claims = Claims(
        store,
        worker_id=worker_id or default_worker_id(),
        lease_ms=limits.claim_lease_ms,
        done_seconds=limits.done_seconds,
    )
    stages = Stages(
        admit=Admit(
            screen=Screen(safety, observer),
            observer=observer,
            metrics=metrics,
            engagement=engagement,
            max_deliveries=limits.max_deliveries,
            events=hooks.events if hooks is not None else None,
            speaker=speaker,
        ),
        read=Read(store, claims, memory=memory, recall=recall),
        decide=Decide(
            commands=commands,
            safety=safety,
            observer=observer,
            engagement=engagement,
            max_message_chars=limits.max_message_chars,
        ),
        answer=Answer(
            drafts=drafts or Drafts(bus, lambda _: False),
            safety=safety,
            observer=observer,
            metrics=metrics,
            hooks=hooks,
            memory=memory,
            tools=tools,
            speaker=speaker,
        ),
        commit=Commit(
            bus=bus,
            claims=claims,
            safety=safety,
            observer=observer,
            metrics=metrics,
            memory=memory,
            engagement=engagement,
        ),
    )
    return Router(
        bus=bus,
        stages=stages,
        scoping=scoping,
        history=history,
        observer=observer,
        engagement=engagement,
        limits=limits,
        metrics=metrics,
    )


def _channels(engagement: LiveChat | None, redis: Client) -> RedisLiveStore | MemoryLiveStore:
    """Where the turns write what the live-chat policy decided: the policy's own store."""
    if engagement is None:
        return RedisLiveStore(redis)
    store = engagement.durable.store
    if not isinstance(store, RedisLiveStore | MemoryLiveStore):
        raise TypeError(f"unknown live store {type(store).__name__}")
    return store
