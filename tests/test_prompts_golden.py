"""Golden tests: every text a user or a model reads, rendered by the code that builds it.

Each case calls the function production uses (the system prompt's builder, the live-chat turn,
the context block, the insights request, the agent's and the router's fallbacks, the commands,
the toolbox, the console, Discord's slash commands, what shows while an answer is written) with
fixed inputs and compares the result with ``tests/golden/<case>.txt`` (a diff when it differs).
``CHORUS_UPDATE_GOLDEN=1 pytest tests/test_prompts_golden.py`` rewrites the files after a
deliberate change: the diff of ``tests/golden`` is the review of what users and models read. A
last test renders every case recording the prompts loaded: a prompt without a case fails here.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from redis.asyncio import Redis

import prompts
from adapters.console import decode_line, no_answer_notice, too_long_notice
from adapters.discord.adapter import no_answer_in_time
from adapters.discord.slash import build_group, build_native
from bot.agent.loop import ExitReason, fallback_text
from bot.agent.prompting import system_prompt
from bot.bus.erasure import StreamEraser
from bot.bus.streams import RedisStreamsBus
from bot.bus.topics import INBOUND
from bot.engagement.policy import Action, Batch, BatchChatter, Decision, PendingMessage, Reason
from bot.engagement.turns import ack, batch_turn, covered_context, idle_turn
from bot.events import Author, ChatMessage, ConversationKey
from bot.llm.types import LLMRequest, LLMResponse, TextPart, ToolCallPart, ToolSpec
from bot.memory.buffers import MemorySettings, MemoryStore, Pin, Recommendation, UserBuffer
from bot.memory.enrichment import render_context
from bot.platform.commands import NativeCommand
from bot.router import memory_commands
from bot.router.core import apology, crash_apology, too_long
from bot.router.text_commands import Commands
from bot.state.connect import open_redis
from bot.state.history import HistoryEntry, HistoryStore
from bot.tools.base import Permission, ToolContext, ToolError
from bot.tools.function import tool
from bot.tools.toolbox import Toolbox
from insights.analyse import (
    build_request,
    checked_answer,
    label_lines,
    parse_analysis,
    retry_request,
)
from tests import (
    golden_builtin,
    golden_identity,
    golden_knowledge,
    golden_moderation,
    golden_onboarding,
    golden_plugins,
    golden_summaries,
    thanks_rig,
)
from tests.golden_persona import system_persona
from tests.golden_progress import progress_texts
from tests.golden_safety import SAFETY_CASES, shown
from tests.golden_voice import voice_texts

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("CHORUS_UPDATE_GOLDEN") == "1"
NOW = datetime(2025, 1, 2, 10, 4, 30, tzinfo=UTC)  # a Thursday
LIVE = ConversationKey(platform="twitch", channel="streamer")
DISCORD = ConversationKey(platform="discord", channel="general")

Case = Callable[[Redis], Awaitable[str]]
CASES: dict[str, Case] = {}


def case(name: str) -> Callable[[Case], Case]:
    def register(fn: Case) -> Case:
        CASES[name] = fn
        return fn

    return register


def message(
    text: str, user: str = "ada", *, conv: ConversationKey = DISCORD, msg_id: str = "m1"
) -> ChatMessage:
    return ChatMessage(
        platform=conv.platform,
        id=msg_id,
        conversation=conv,
        author=Author(id=user, display_name=user.title()),
        text=text,
        sent_at=NOW,
    )


def pending(text: str, user: str, at: float, *, question: bool = False) -> PendingMessage:
    return PendingMessage(message(text, user, conv=LIVE, msg_id=f"{user}-{at:g}"), at, question)


def sample_buffer(*, timezone: str | None = "Europe/Paris") -> UserBuffer:
    def pin(text: str, confidence: float) -> Pin:
        return Pin(text=text, source="m1", confidence=confidence, created_at=NOW, updated_at=NOW)

    return UserBuffer(
        platform="discord",
        user_id="ada",
        pins=(pin("Is vegan", 0.9), pin("Lives in Lyon", 0.9), pin("Learning Rust", 0.6)),
        recommendations=(
            Recommendation(text="Prefers short answers", created_at=NOW),
            Recommendation(text="Check restaurant pages", tool="fetch_url", created_at=NOW),
        ),
        timezone=timezone,
    )


# -- the model's instructions -------------------------------------------------------------------
@case("system")
async def _system(redis: Redis) -> str:
    return system_prompt("Chorus")


@case("live_batch")
async def _live_batch(redis: Redis) -> str:
    batch = Batch(
        Reason.CHATTER,
        (
            BatchChatter("bo", "Bo", (pending("what map is next?", "bo", 1.0, question=True),)),
            BatchChatter(
                "cy",
                "Cy",
                (pending("gg", "cy", 2.0), pending("that clutch {{was}} <b>", "cy", 3.0)),
            ),
        ),
        context=(pending("lol", "di", 4.0), pending("hype", "ed", 5.0)),
    )
    return shown(batch_turn(LIVE, batch))


@case("live_batch_without_context")
async def _live_batch_alone(redis: Redis) -> str:
    chatter = BatchChatter("bo", "Bo", (pending("hello chat", "bo", 1.0),))
    return shown(batch_turn(LIVE, Batch(Reason.ADDRESSED, (chatter,))))


@case("live_idle")
async def _live_idle(redis: Redis) -> str:
    return shown(idle_turn(LIVE))


@case("live_earlier_lines")
async def _live_earlier(redis: Redis) -> str:
    covered = (pending("anyone here?", "bo", 1.0), pending("hello??", "bo", 2.0))
    return covered_context(Decision(Action.ANSWER_NOW, Reason.ADDRESSED, covered))


@case("context_block")
async def _context_block(redis: Redis) -> str:
    text = "Any vegan restaurant in Lyon? Keep it short."
    return render_context(sample_buffer(), message(text), MemorySettings(), NOW)


@case("context_block_unknown_timezone")
async def _context_unknown_zone(redis: Redis) -> str:
    empty = UserBuffer(platform="discord", user_id="ada")
    return render_context(empty, message("hello"), MemorySettings(), NOW)


def insights_request() -> LLMRequest:
    yesterday = NOW - timedelta(days=1)
    entries = [
        HistoryEntry(role="user", text="I'm vegan, any tips?", message_id="m1", author_id="ada"),
        HistoryEntry(role="assistant", text="Sure: lentils.", at=yesterday),
        HistoryEntry(role="user", text="Ada <3 steak", message_id="m2", author_id="bo"),
    ]
    lines = label_lines("discord", "ada", [(DISCORD, entries)])
    return build_request(
        "model-x", platform="discord", display_name="Ada", buffer=sample_buffer(), lines=lines
    )


@case("insights_instructions")
async def _insights_instructions(redis: Redis) -> str:
    system = insights_request().system[0]
    assert isinstance(system, TextPart)
    return system.text


@case("insights_request")
async def _insights_request(redis: Redis) -> str:
    return insights_request().messages[0].text


@case("insights_retry")
async def _insights_retry(redis: Redis) -> str:
    with pytest.raises(ValueError) as invalid:
        parse_analysis("I think she likes lentils.")
    retry = retry_request(insights_request(), "", invalid.value)
    cut = LLMResponse(parts=(TextPart(text='{"pins": ['),), stop_reason="max_tokens")
    with pytest.raises(ValueError) as cut_off:
        checked_answer(cut)
    again = retry_request(insights_request(), cut.text, cut_off.value)
    return "\n---\n".join(m.text for m in (*retry.messages[1:], *again.messages[1:]))


# -- what users read when there is no answer of the model's own ---------------------------------
@case("agent_fallbacks")
async def _agent_fallbacks(redis: Redis) -> str:
    texts = {reason: fallback_text(reason) for reason in ExitReason}
    return "\n".join(f"{reason.value}: {text}" for reason, text in texts.items() if text)


@case("router_replies")
async def _router_replies(redis: Redis) -> str:
    return "\n".join([too_long(100_000, 8_000), apology(), crash_apology()])


@case("live_acks")
async def _live_acks(redis: Redis) -> str:
    texts = {reason: ack(reason) for reason in Reason}
    return "\n".join(f"{reason.value}: {text}" for reason, text in texts.items() if text)


# -- commands -----------------------------------------------------------------------------------
async def run_commands(
    redis: Redis, *texts: str, user: str = "ada", conversations: int = 1, streams: bool = False
) -> str:
    """Each command's reply, after ``user`` said "hi" in ``conversations`` conversations (over
    the Redis Streams bus with ``streams``, which keeps each "hi" in a stream)."""
    history = HistoryStore(redis, max_messages=50, ttl_seconds=3600)
    memory = MemoryStore(redis, MemorySettings())
    commands = Commands(history)
    queue = f"golden_{uuid.uuid4().hex[:8]}"
    bus = RedisStreamsBus(redis, consumer="golden", namespace=queue) if streams else None
    memory_commands.register(
        commands,
        memory,
        history,
        clock=lambda: NOW,
        insights_queue=queue,
        eraser=StreamEraser.for_bus(bus, redis),
    )
    for n in range(conversations):
        conv = DISCORD if n == 0 else ConversationKey(platform="discord", channel=f"other{n}")
        said = message("hi", user, conv=conv, msg_id=f"hi{n}")
        await history.append(conv, HistoryEntry.from_message(said))
        if bus is not None:
            await bus.publish(INBOUND, said)
        await memory.touch("discord", user, conv, now=NOW)
    replies = []
    for n, text in enumerate(texts):
        reply = await commands.handle(message(text, user, msg_id=f"c{n}"))
        replies.append(f"> {text}\n{reply}")
    return "\n\n".join(replies)


@case("command_help")
async def _help(redis: Redis) -> str:
    return await run_commands(redis, "/help")


@case("command_replies")
async def _commands(redis: Redis) -> str:
    return await run_commands(
        redis,
        "/pins",
        "/remember",
        "/remember " + "x" * 80,
        "/remember I am vegan",
        "/remember I am vegan",
        "/remember I am a vegan",
        "/timezone",
        "/timezone Mars/Olympus",
        "/timezone europe/paris",
        "/timezone",
        "/pins",
        "/timezone clear",
        "/forget",
        "/reset",
    )


@case("command_pins_with_recommendations")
async def _pins_full(redis: Redis) -> str:
    memory = MemoryStore(redis, MemorySettings())
    full = sample_buffer().model_copy(update={"user_id": "cy"})
    await memory.update("discord", "cy", lambda _: full)
    return await run_commands(redis, "/pins", "/timezone", "/forget", user="cy", streams=True)


@case("command_pins_without_notes")
async def _pins_recs_only(redis: Redis) -> str:
    memory = MemoryStore(redis, MemorySettings())
    rec = sample_buffer().recommendations[:1]
    only = UserBuffer(platform="discord", user_id="di", recommendations=rec)
    await memory.update("discord", "di", lambda _: only)
    return await run_commands(redis, "/pins", "/forget", user="di", conversations=2, streams=True)


# -- tools, console, Discord --------------------------------------------------------------------
@tool(timeout=0.01)
async def stuck() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return ""


@tool
async def broken() -> str:
    """Always fails."""
    raise RuntimeError("boom")


@tool
async def silent() -> str:
    """Fails without saying why."""
    raise ToolError("")


class Number:
    """A tool (not a function tool, which converts) that breaks its contract: no text."""

    spec = ToolSpec(name="number", description="A number.", parameters={"type": "object"})
    permission = Permission.EVERYONE
    timeout = 1.0

    async def call(self, arguments: dict[str, object], ctx: ToolContext) -> str:
        return 7  # type: ignore[return-value]


@tool
async def essay() -> str:
    """Returns too much."""
    return "word " * 100


@tool(permission=Permission.MODERATOR)
async def ban() -> str:
    """Moderators only."""
    return "banned"


@tool(permission=Permission.OWNER)
async def shutdown() -> str:
    """The owner only."""
    return "bye"


@case("tool_errors")
async def _tool_errors(redis: Redis) -> str:
    tools = [stuck, broken, silent, Number(), essay, ban, shutdown]
    box = Toolbox(tools, max_result_chars=100)  # type: ignore[arg-type]
    ctx = ToolContext(message=message("run them"))
    names = ["nope", "stuck", "broken", "silent", "number", "essay", "ban", "shutdown"]
    results = [await box.execute(ToolCallPart(id=n, name=n, arguments={}), ctx) for n in names]
    empty = await Toolbox([], max_result_chars=100).execute(
        ToolCallPart(id="x", name="nope", arguments={}), ctx
    )
    return "\n".join(f"{r.name}: {r.content}" for r in [*results, empty])


@case("console_notices")
async def _console(redis: Redis) -> str:
    notices = [decode_line(b"caf\xe9", 3)[1], decode_line(b"  ", 4)[1]]
    notices += [too_long_notice(5), no_answer_notice(600.0)]
    return "\n".join(n or "" for n in notices)


@case("discord_slash_commands")
async def _discord(redis: Redis) -> str:
    async def ignore(interaction: object, name: str) -> None:
        return None

    group = build_group(ignore)
    lines = [f"/{group.name}: {group.description}"]
    lines += [golden_identity.slash_line(group.name, c) for c in group.commands]
    roll = build_native(NativeCommand("roll", "Roll dice"), ignore)
    lines += [f"/{roll.name} [{p.name}]: {p.description}" for p in roll.parameters]
    return "\n".join([*lines, no_answer_in_time()])


CASES |= {"plugin_commands": golden_plugins.plugin_commands, **golden_identity.CASES}
CASES |= {
    "voice": voice_texts,
    "progress": progress_texts,
    "system_persona": system_persona,
    **SAFETY_CASES,
}
CASES |= {"live_thanks": thanks_rig.live_thanks, "knowledge": golden_knowledge.knowledge_texts}
CASES |= golden_summaries.CASES | golden_onboarding.CASES | golden_builtin.CASES
CASES |= {"plugin_moderation": golden_moderation.moderation_texts}


# -- the tests ----------------------------------------------------------------------------------
@pytest.fixture
async def store() -> AsyncIterator[Redis]:
    client = await open_redis(f"memory://golden-{uuid.uuid4().hex[:12]}")
    try:
        yield client
    finally:
        await client.aclose()


def compare(name: str, rendered: str) -> None:
    path = GOLDEN / f"{name}.txt"
    text = rendered + "\n"
    if UPDATE:
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"no golden file {path}; run with CHORUS_UPDATE_GOLDEN=1 to write it"
    expected = path.read_text(encoding="utf-8")
    if expected != text:
        diff = difflib.unified_diff(
            expected.splitlines(keepends=True),
            text.splitlines(keepends=True),
            f"golden/{name}.txt",
            "rendered",
        )
        pytest.fail(
            f"{name} renders differently from golden/{name}.txt "
            "(CHORUS_UPDATE_GOLDEN=1 accepts the change):\n" + "".join(diff),
            pytrace=False,
        )


@pytest.mark.parametrize("name", sorted(CASES))
async def test_rendered_text_matches_its_golden_file(name: str, store: Redis) -> None:
    compare(name, await CASES[name](store))


def test_every_golden_file_belongs_to_a_case() -> None:
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)


@pytest.fixture
def loaded(monkeypatch: pytest.MonkeyPatch) -> Iterator[set[str]]:
    names: set[str] = set()
    real = prompts.load

    def recording(name: str) -> str:
        names.add(name)
        return real(name)

    monkeypatch.setattr(prompts, "load", recording)
    yield names


async def test_every_prompt_is_shown_by_a_golden_case(loaded: set[str], store: Redis) -> None:
    for render in CASES.values():
        await render(store)
    assert set(prompts.names()) - loaded == set()
    assert loaded <= set(prompts.names())


def test_user_text_that_looks_like_a_placeholder_stays_as_written() -> None:
    chatter = BatchChatter("bo", "{{names}}", (pending("{{lines}} {{context}}", "bo", 1.0),))
    turn = batch_turn(LIVE, Batch(Reason.ADDRESSED, (chatter,)))
    assert "addressed to {{names}} by name" in turn.context
    assert "- {{names}}: {{lines}} {{context}}" in turn.message.text
