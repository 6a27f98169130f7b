"""Recall benchmark: Redis bytes per channel for summaries and community notes, and what they
cost the reply path.

Bytes are Redis's own ``MEMORY USAGE`` (real Redis only) of one channel's summary keys: the
summaries at the default TTL (30 days, one summary each, every summary at its 600-character
maximum, five authors each), the community notes at their cap (12 notes of 120 characters and
the mood), and what the history list holds past its window before the summariser takes the lines
(CHORUS_SUMMARY_AFTER_LINES lines of 200 characters). The reply path is measured with the real
app over the anthropic SDK and a loopback server, with a scope turning community memory on and
both keys filled: round trips per answered message (counted at the connection), and the time to
render the ``<context>`` block with and without them (median and p90 of many renders).
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from datetime import timedelta
from pathlib import Path
from tempfile import TemporaryDirectory
from typing import Any

from bench.memory import REAL
from bot.events import Author, ChatMessage, ConversationKey, utcnow
from bot.memory import summaries
from bot.memory.buffers import MemorySettings, UserBuffer
from bot.memory.enrichment import render_context
from bot.state import connect, keys
from bot.state.history import HistoryEntry, HistoryStore


def full_summaries(days: int = 30) -> list[summaries.Summary]:
    now = utcnow()
    out = []
    for n in range(days):
        at = now - timedelta(days=n + 1)
        text = f"Day {n}: the channel planned the meetup and argued about the release. " * 12
        out.append(
            summaries.Summary(
                day=summaries.day_of(at),
                text=text[: summaries.SUMMARY_TEXT_MAX],
                users=tuple(str(10**17 + n * 10 + u) for u in range(5)),
                first=at,
                last=at,
                lines=120,
            )
        )
    return sorted(out, key=lambda s: s.day)


def full_community() -> summaries.Community:
    now = utcnow()
    notes = tuple(
        summaries.Note(
            kind=("topic", "norm", "joke")[n % 3],
            text=(f"note {n} about what this channel keeps coming back to " * 4)[
                : summaries.NOTE_TEXT_MAX
            ],
            user=str(10**17 + n),
            message_id=str(10**18 + n),
            at=now,
            confidence=0.8,
        )
        for n in range(summaries.MAX_NOTES)
    )
    mood = ("relaxed, joking about the release " * 4)[: summaries.MOOD_MAX]
    users = tuple(str(10**17 + n) for n in range(8))
    return summaries.Community(notes=notes, mood=mood, mood_users=users, mood_at=now)


async def channel_bytes(url: str) -> dict[str, int]:
    redis = await connect.open_redis(url)
    conv = ConversationKey(platform="discord", channel=f"bench-{uuid.uuid4().hex[:8]}")
    settings = MemorySettings()
    try:
        await redis.set(keys.summary("sum", conv), summaries.dump_summaries(full_summaries()))
        await redis.set(keys.summary("notes", conv), summaries.dump_community(full_community()))
        lines = [
            HistoryEntry(
                role="user",
                text="x" * 200,
                message_id=str(10**18 + n),
                author_id=str(10**17 + n % 7),
                author_name="Someone",
                at=utcnow(),
            )
            for n in range(40 + settings.summary_after_lines)
        ]
        sizes = {
            kind: int(await redis.memory_usage(keys.summary(kind, conv)) or 0)
            for kind in ("sum", "notes")
        }
        history = HistoryStore(
            redis, max_messages=40, ttl_seconds=3600, **summaries.history_room(settings)
        )
        for label, held in (("window", lines[:40]), ("kept", lines)):
            await redis.delete(keys.history(conv))
            await history.append(conv, *held)
            sizes[label] = int(await redis.memory_usage(keys.history(conv)) or 0)
        sizes["lines"] = sizes.pop("kept") - sizes.pop("window")
        await redis.delete(
            keys.history(conv), *(keys.summary(kind, conv) for kind in ("sum", "notes"))
        )
        return sizes
    finally:
        await redis.aclose()


def render_times(rounds: int = 1000) -> tuple[float, float, float]:
    """Median milliseconds to render the context block: without them; with 30 summaries and
    full notes (their data lines cached, as from the second turn on); p90 of the latter."""
    message = ChatMessage(
        platform="discord",
        id="m1",
        conversation=ConversationKey(platform="discord", channel="c"),
        author=Author(id="ada", display_name="Ada"),
        text="Where is the meetup on Friday, and what about the release?",
    )
    buffer = UserBuffer(platform="discord", user_id="ada")
    settings = MemorySettings()
    channel_memory = summaries.ChannelMemory(tuple(full_summaries()), full_community())
    now = utcnow()

    def samples(with_recall: summaries.ChannelMemory | None) -> list[float]:
        render_context(
            buffer, message, settings, now, channel_memory=with_recall
        )  # warm the caches
        out = []
        for _ in range(rounds):
            start = time.perf_counter()
            render_context(buffer, message, settings, now, channel_memory=with_recall)
            out.append((time.perf_counter() - start) * 1000)
        return sorted(out)

    base, full = samples(None), samples(channel_memory)
    return statistics.median(base), statistics.median(full), full[int(len(full) * 0.9)]


async def round_trips(url: str, messages: int = 20) -> float:
    from bot.app import Chorus
    from bot.settings import load_settings
    from tests.loopback.anthropic_server import AnthropicServer
    from tests.test_memory_e2e import Console, stop

    with TemporaryDirectory() as tmp:
        config = Path(tmp) / "chorus.toml"
        config.write_text(
            '[[scope]]\nmatch = "console"\ncommunity_memory = true\n', encoding="utf-8"
        )
        async with AnthropicServer() as server:
            server.default_reply = lambda body: "Sure."
            env = {
                "CHORUS_MODEL": "anthropic:claude-test",
                "ANTHROPIC_API_KEY": "k",
                "ANTHROPIC_BASE_URL": server.base_url,
                "CHORUS_REDIS_URL": url,
            }
            settings = load_settings(environ=env, env_file=None, config=config, warn=False)
            app = await Chorus.from_settings(settings)
            await app.start()
            tag = f"bench{uuid.uuid4().hex[:8]}"
            console = Console(app, tag)
            listener = asyncio.create_task(console.listen())
            try:
                conv = ConversationKey(platform="console", channel=f"ada-{tag}")
                await app.redis.set(
                    keys.summary("sum", conv), summaries.dump_summaries(full_summaries())
                )
                await app.redis.set(
                    keys.summary("notes", conv), summaries.dump_community(full_community())
                )
                await console.say("ada", "warm-up")
                from tests.roundtrips import counting_round_trips

                with counting_round_trips() as trips:
                    for n in range(messages):
                        await console.say("ada", f"what about the meetup, question {n}?")
            finally:
                await stop(console, listener)
    return trips.count / messages


async def main() -> list[str]:
    lines = ["## Summaries and community memory", ""]
    lines.append("| store | round trips per answered message (summaries + community notes on) |")
    lines.append("|---|---|")
    for label, url in (
        ("embedded (memory://)", "memory://bench-summaries"),
        ("Redis 127.0.0.1", REAL),
    ):
        try:
            lines.append(f"| {label} | {await round_trips(url):.2f} |")
        except Exception as exc:
            lines.append(f"| {label} | not measured: {exc} |")
    base, full, p90 = render_times()
    lines += [
        "",
        f"context block render: {base:.3f} ms without them, {full:.2f} ms (p90 {p90:.2f} ms) "
        "with 30 summaries + 12 notes (median of 1,000 renders each)",
        "",
        "| one channel's key | at its cap | `MEMORY USAGE` bytes |",
        "|---|---|---|",
    ]
    try:
        sizes: dict[str, Any] = await channel_bytes(REAL)
    except Exception as exc:
        lines.append(f"| (real Redis needed) | | not measured: {exc} |")
        return lines
    caps = {
        "sum": "30 daily summaries x 600 chars, 5 authors each",
        "notes": "12 notes x 120 chars + mood",
        "lines": "history: 20 lines past the 40-line window x 200 chars",
    }
    for kind, size in sizes.items():
        name = "hist (the extra)" if kind == "lines" else f"summ:{kind}"
        lines.append(f"| `{name}` | {caps[kind]} | {size:,} |")
    lines.append(f"| total | | {sum(sizes.values()):,} |")
    return lines


if __name__ == "__main__":
    print("\n".join(asyncio.run(main())))
