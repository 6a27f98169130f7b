"""What each dashboard page shows, read from Redis (and from this process where only it knows).

Why apart from the server: each function here is one page's reads, batched into as few round
trips as the page allows, and nothing here scans: every list comes from an index kept at write
time (bot/state/turnlog.py), every count from the timeline (also bot/state/turnlog.py). bench/admin.py
holds them to 200 ms with 10,000 conversations and 100,000 people in Redis.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.admin.masking import mask_urls
from bot.engagement.turns import LiveChat
from bot.events import ConversationKey, ModerationRequest
from bot.memory.buffers import MemoryStore, UserBuffer, source_ref
from bot.quota.ledger import QuotaLedger
from bot.quota.plan import QuotaConfig
from bot.router.text_commands import Commands
from bot.safety.audit import Audit
from bot.settings import Settings
from bot.state import turnlog
from bot.state.connect import Client
from bot.state.cost import MICRO, CostLedger
from bot.state.engagement import RedisLiveStore
from bot.state.history import HistoryStore

LIVE_PLATFORMS = ("twitch", "youtube")
CHECK_SECONDS = 2.0
PROVENANCE_CONVERSATIONS = 5  # whose history is searched for the lines pins came from


@dataclass
class Sources:
    """Everything the dashboard reads or changes; what a process lacks is None."""

    settings: Settings
    redis: Client
    memory: MemoryStore
    history: HistoryStore
    audit: Audit
    checks: Mapping[str, Callable[[], Awaitable[bool]]] = field(default_factory=dict)
    provider: object | None = None  # the model chain (its breakers), in this process
    commands: Commands | None = None  # the chat commands: /forget, the same path
    live: LiveChat | None = None  # this process's live channels (mentions waiting)
    reload: Callable[[], None] | None = None  # what SIGHUP (`chorus reload`) does
    # hands a moderation request to its platform's gateway (the Moderation page's undo)
    moderate: Callable[[ModerationRequest], Awaitable[None]] | None = None
    plugins: object | None = None  # the plugins this process runs (LoadedPlugins)
    chat: object | None = None  # the router's parts the test chat uses (chat_page.ChatParts)


async def overview(src: Sources, now: datetime) -> dict[str, Any]:
    async def run(check: Callable[[], Awaitable[bool]]) -> bool:
        try:
            async with asyncio.timeout(CHECK_SECONDS):
                return await check()
        except Exception:
            return False

    names = sorted(src.checks)
    results = await asyncio.gather(*(run(src.checks[n]) for n in names))
    states = getattr(src.provider, "breaker_states", None)
    models = getattr(src.provider, "models", None) or [str(src.settings.llm.model or "")]
    breakers = states() if callable(states) else {}
    rows = await turnlog.read_minutes(src.redis, now, 60)
    day = await turnlog.read_day(src.redis, now)
    tokens_in = day.get("tokens_in", 0)
    cap = src.settings.quota.cost_usd_per_day
    spent = await CostLedger(src.redis, src.settings.state.bus_namespace).today(now)
    return {
        "checks": list(zip(names, results, strict=True)),
        "chain": [(m, breakers.get(m, "closed")) for m in models if m],
        "minutes": rows,
        "series": {
            "in": turnlog.series(rows, "in:"),
            "out": turnlog.series(rows, "out:"),
            "replies": turnlog.series(rows, "replies"),
            "errors": turnlog.series(rows, "errors"),
        },
        "last": {
            "in": turnlog.total(rows[-1][1], "in:"),
            "out": turnlog.total(rows[-1][1], "out:"),
            "replies": rows[-1][1].get("replies", 0),
        },
        "today": {
            "tokens": tokens_in + day.get("tokens_out", 0),
            "cost": day.get("cost_micro", 0) / turnlog.COST_SCALE,
            "cache_share": day.get("cache_read", 0) / tokens_in if tokens_in else 0.0,
            "replies": day.get("replies", 0),
        },
        "cap": {  # the daily cost cap's ledger (bot/state/cost.py): what every call counts to
            "limit": cap,
            "spent": spent.spent / MICRO,
            "reserved": spent.held / MICRO,
        },
        "errors_hour": sum(turnlog.series(rows, "errors")),
    }


async def conversations(src: Sources, platform: str | None) -> dict[str, Any]:
    platforms = [platform] if platform in turnlog.PLATFORMS else list(turnlog.PLATFORMS)
    found = await turnlog.recent(src.redis, platforms, limit=50)
    return {"platforms": turnlog.PLATFORMS, "chosen": platform or "", "recent": found}


async def conversation(src: Sources, conv: ConversationKey) -> dict[str, Any]:
    records, lines = await asyncio.gather(
        turnlog.read_log(src.redis, conv, limit=100), src.history.load(conv)
    )
    texts = {line.message_id: line.text for line in lines if line.message_id}
    return {"conv": conv, "records": records, "texts": texts, "history": lines[-20:]}


async def people(src: Sources, query: str, platform: str | None) -> dict[str, Any]:
    found = await turnlog.find_people(src.redis, query, platform or None) if query else []
    return {"query": query, "platform": platform or "", "found": found}


async def person(src: Sources, platform: str, user_id: str, name: str = "") -> dict[str, Any]:
    """``name``: as the search found them (the index is by name; a person may have several).
    It comes from the URL, so it is shown only if the names index holds it for this person;
    otherwise the page names them by id (a link cannot put words in the heading)."""
    asked = name.strip()[:64]
    buffer, convs, known = await asyncio.gather(
        src.memory.load(platform, user_id),
        src.memory.conversations(platform, user_id),
        turnlog.went_by(src.redis, platform, user_id, asked) if asked else _no(),
    )
    return {
        "platform": platform,
        "user_id": user_id,
        "name": asked if known else user_id,
        "lines": await source_lines(src, user_id, convs[:PROVENANCE_CONVERSATIONS]),
        "buffer": buffer,
        "conversations": convs[:20],
        "can_forget": src.commands is not None,
    }


async def source_lines(src: Sources, user_id: str, convs: list[ConversationKey]) -> dict[str, str]:
    """The person's own lines still in the history of their latest conversations, by the
    reference a pin keeps of its source message (``source_ref``): a pin's provenance."""
    if not convs:
        return {}
    return {
        source_ref(entry.message_id): entry.text
        for entries in await src.history.load_many(convs)
        for entry in entries
        if entry.message_id and entry.author_id == user_id
    }


def export(buffer: UserBuffer, conversations: list[ConversationKey]) -> dict[str, Any]:
    data = buffer.model_dump(mode="json")
    data["conversations"] = [str(c) for c in conversations]
    return data


def ambient_channels(settings: Settings) -> dict[str, set[str]]:
    """The Discord and Slack channels where the bot joins in unprompted, by platform
    (``DISCORD_AMBIENT_CHANNELS``, ``SLACK_AMBIENT_CHANNELS`` and the channel scopes whose
    ``engagement.mode`` is ambient, which the settings add to those lists)."""
    return {
        "discord": {str(channel) for channel in settings.discord.ambient_channels},
        "slack": set(settings.slack.ambient_channels),
    }


async def live(src: Sources, now: float) -> dict[str, Any]:
    """Every live channel (Twitch and YouTube conversations active lately) and every ambient
    one: each configured ambient channel, and the threads of those active lately."""
    ambient = ambient_channels(src.settings)
    found = await turnlog.recent(src.redis, LIVE_PLATFORMS + tuple(ambient), limit=50)
    convs = [conv for platform in LIVE_PLATFORMS for conv, _ in found[platform]]
    configured = [
        ConversationKey(platform=platform, channel=channel)
        for platform, channels in ambient.items()
        for channel in sorted(channels)
    ]
    threads = [
        conv
        for platform in ambient
        for conv, _ in found[platform]
        if conv.channel in ambient[platform] and conv not in configured
    ]
    convs += configured + threads
    paused = await RedisLiveStore(src.redis).paused_many(convs)
    logs = await turnlog.read_logs(src.redis, convs, limit=200)
    channels = []
    for conv, is_paused, records in zip(convs, paused, logs, strict=True):
        recent = [r for r in records if now - r.at <= 300]
        counts = Counter(r.decision for r in recent)
        state = src.live.engagement.states.get(conv) if src.live is not None else None
        channels.append(
            {
                "conv": conv,
                "ambient": conv.platform not in LIVE_PLATFORMS,
                "paused": is_paused,
                "per_minute": round(len(recent) / 5, 1),
                "replies_per_minute": round(counts["answered"] / 5, 1),
                "waiting": None
                if state is None
                else sum(1 for c in state.pending.values() for p in c.messages if p.addressed),
            }
        )
    return {"channels": channels, "quota": await youtube_quota(src)}


async def youtube_quota(src: Sources) -> dict[str, int] | None:
    """Today's YouTube quota: spent and left (None when YouTube is not configured)."""
    youtube = src.settings.youtube
    if not (youtube.enabled and youtube.client_id and youtube.client_id.strip()):
        return None
    config = QuotaConfig.from_settings(youtube)
    ledger = QuotaLedger(
        src.redis, config, project=youtube.client_id.strip(), clock=lambda: datetime.now(UTC)
    )
    view = await ledger.view()
    spent = view.usage.units
    plan = view.budget(config, datetime.now(UTC))
    return {
        "spent": spent,
        "left": max(youtube.daily_quota - spent, 0),
        "replies_left": plan.replies_left,
    }


async def insights(src: Sources, now: datetime) -> dict[str, Any]:
    from bot.state.insight_jobs import DEFAULT_QUEUE, JobQueue, recent_outcomes

    queue = JobQueue(src.redis, max_delay=0, queue=DEFAULT_QUEUE)
    size, pending = await queue.peek(now, limit=25)
    jobs = [dataclasses.asdict(job) for job in pending]
    audit = [e for e in await _audit(src) if e.direction == "admin"][-20:]
    outcomes = await recent_outcomes(src.redis, queue=DEFAULT_QUEUE, limit=25)
    memory = src.settings.memory
    return {
        "size": size,
        "jobs": jobs,
        "enabled": memory.insights_enabled,
        "user_daily": memory.insights_user_daily_tokens,
        "channel_daily": memory.insights_channel_daily_tokens,
        "changes": list(reversed(audit)),
        "outcomes": outcomes,
    }


async def _audit(src: Sources) -> list[Any]:
    from bot.safety.audit import read_audit

    return await read_audit(src.redis, namespace=src.settings.state.bus_namespace, count=200)


def settings_rows(src: Sources) -> list[tuple[str, str, str]]:
    """Every setting: name, value (secrets hidden, a URL's password masked), where it came
    from."""
    settings = src.settings
    rows = []
    for section in type(settings).model_fields:
        part = getattr(settings, section)
        for name in type(part).model_fields:
            if section == "file":
                continue
            value = getattr(part, name)
            if settings.is_secret(section, name):
                shown = "(not set)" if value is None else "set, hidden"
            elif isinstance(value, frozenset | set | tuple | list):
                shown = ", ".join(sorted(map(mask_urls, map(str, value)))) or "(none)"
            else:
                shown = "(not set)" if value is None else mask_urls(str(value))
            rows.append((f"{section}.{name}", shown, settings.origin(section, name)))
    return rows


def clock() -> float:
    return time.time()


async def _no() -> bool:
    return False
