"""The test chat: talk to the bot from the dashboard as a console user placed in a chosen scope,
the answer streamed into the page as the model writes it, with the turn's log beside it.

Why it runs the turn here rather than through the bus: a message from the dashboard placed in
``discord:GUILD/CHANNEL`` must get that place's persona, tools and safety, but its answer must
never be posted in that channel; so the page builds the place's message and runs the parts a
turn runs, the ones this process's router uses: the scope's profile (``Scoping.profile``: the
persona's system text, the scope's model chain and its agent, the scope's tool lists), the
safety gate's inbound screen and outbound check for that place, and the agent's own streaming
(``ReplySink``), each model call metered against the daily cost cap as ``chorus knowledge
index``'s are (``Spend``: refused once the cap is reached). What it does not do is what belongs
to a real conversation: no memory of a person, no per-user quotas, no turn log in Redis; the conversation with the dashboard is kept in the
history under ``console:dashboard-ACCOUNT`` (the last ``HISTORY_TURNS`` lines), so a second
question follows the first.

Why a streamed page and not a script: the dashboard has no script (its Content-Security-Policy
forbids inline ones and there is no build step); the answer's page is sent in pieces as the
model writes (chunked HTML that the browser renders as it arrives), then the turn log and the
page's end. A streamed response is not passed through the masking middleware, so every piece is
masked here.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from typing import Any
from urllib.parse import quote

from aiohttp import web

from bot.admin.views import Sources
from bot.agent.loop import Agent
from bot.agent.reasoning import decide
from bot.events import Author, ChatMessage, ConversationKey
from bot.llm.errors import LLMError
from bot.llm.pricing import PriceTable
from bot.ops.model_calls import CostCapReached, Spend
from bot.router.scoping import Scoping
from bot.safety.gate import SafetyGate
from bot.settings.scopes import parse_match
from bot.state.history import HistoryEntry, HistoryStore
from bot.tools.base import ToolContext
from bot.tools.toolbox import Toolbox

HISTORY_TURNS = 20
SPLIT, TURN = "<!--answer-->", "<!--turn-->"  # where the answer and its turn log go
Render = Callable[..., web.Response]


@dataclass
class ChatParts:
    """What the test chat takes from the process's router (``bot/app.py`` hands them over)."""

    scoping: Scoping
    tools: Toolbox
    safety: SafetyGate
    prices: PriceTable | None = None


def place_message(place: str, account: str, text: str) -> ChatMessage:
    """The message a console user ``account`` would send in ``place`` (a scope's match form:
    ``discord:GUILD/CHANNEL``, ``console:NAME``...), addressed to the bot. ``ValueError`` for a
    place that is not one."""
    where = parse_match(place)
    servers = ("discord", "slack")
    channel = where.channel or (where.server if where.platform not in servers else "") or "test"
    server = where.server if where.platform in servers else None
    who = re.sub(r"[^a-z0-9_-]", "-", account.lower()) or "token"
    return ChatMessage(
        platform=where.platform,
        id=f"dashboard-{uuid.uuid4().hex}",
        conversation=ConversationKey(platform=where.platform, channel=channel),
        author=Author(id=f"dashboard-{who}", display_name=account or "dashboard"),
        text=text,
        mentions_bot=True,
        server=server,
    )


def history_key(account: str) -> ConversationKey:
    who = re.sub(r"[^a-z0-9_-]", "-", account.lower()) or "token"
    return ConversationKey(platform="console", channel=f"dashboard-{who}")


class Sink:
    """The agent's ``ReplySink``: each text delta written to the page as it comes."""

    def __init__(self, response: web.StreamResponse, mask: Callable[[str], str]) -> None:
        self.response = response
        self.mask = mask
        self.chunks = 0
        self.tools: list[str] = []

    async def text(self, delta: str) -> None:
        if delta:
            self.chunks += 1
            await self.response.write(f"<span>{escape(self.mask(delta))}</span>".encode())

    async def reset(self) -> None:
        await self.response.write(b'<hr class="retry">')

    async def working(self, tools: Any) -> None:
        self.tools += list(tools)
        names = escape(", ".join(tools))
        await self.response.write(f'<em class="tools">(using {names})</em>'.encode())


async def page(request: web.Request, render: Render, *, available: bool) -> web.Response:
    return render(
        request,
        "chat",
        page="chat",
        available=available,
        place=request.query.get("place", ""),
        text="",
        streaming=False,
    )


async def send(
    parts: ChatParts,
    src: Sources,
    request: web.Request,
    render: Render,
    account: str,
    mask: Callable[[str], str],
) -> web.StreamResponse:
    """Answer the form's ``text`` as the form's ``place`` would get it, streamed."""
    form = await request.post()
    place, text = str(form.get("place", "")).strip(), str(form.get("text", "")).strip()
    if not text:
        raise web.HTTPSeeOther(f"/chat?place={quote(place, safe='')}")
    try:
        message = place_message(place, account, text[:4000])
    except ValueError as exc:
        refused = render(
            request, "chat", page="chat", available=True, place=place, text=text,
            streaming=False, problem=str(exc),
        )  # fmt: skip
        refused.set_status(400)
        return refused
    whole = render(
        request, "chat", page="chat", available=True, place=place, text="", streaming=True,
        asked=text,
    ).text or ""  # fmt: skip
    head, _, tail = whole.partition(SPLIT)
    closing, _, end = tail.partition(TURN)
    response = web.StreamResponse(headers={"Content-Type": "text/html; charset=utf-8"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    await response.write(mask(head).encode())
    spend = Spend.for_settings(src.settings, src.redis, parts.prices)  # the daily cost cap
    log = await _turn(parts, src.history, spend, message, account, response, mask)
    await response.write(mask(closing).encode())
    turn = render(request, "chat_turn", log=log).text or ""
    await response.write(mask(turn + end).encode())
    await response.write_eof()
    return response


async def _turn(
    parts: ChatParts,
    history: HistoryStore,
    spend: Spend | None,
    message: ChatMessage,
    account: str,
    response: web.StreamResponse,
    mask: Callable[[str], str],
) -> dict[str, Any]:
    started = time.perf_counter()
    profile = parts.scoping.profile(message)
    log: dict[str, Any] = {"scope": profile.name, "place": str(message.conversation)}
    screened = parts.safety.screen(message)
    if screened.action != "pass":
        shown = screened.text or "(the bot would stay quiet: the message breaks a rule here)"
        await response.write(f"<span>{escape(mask(shown))}</span>".encode())
        return log | {"outcome": f"safety: {screened.action}"}
    conv = history_key(account)
    past = (await history.load(conv))[-HISTORY_TURNS:]
    ctx = ToolContext(message=message, tools=profile.tools)
    request = profile.assembler.build(
        message,
        past,
        tools=parts.tools.specs_for(ctx),
        context="",
        reasoning=decide(message.text, profile.reasoning, profile.reasoning_max),
    )
    sink = Sink(response, mask)
    agent = profile.agent
    if spend is not None:  # each model call reserved and settled against the cap
        metered = spend.provider(agent.provider, "dashboard chat")
        agent = Agent(metered, tools=agent.tools, limits=agent.limits, metrics=agent.metrics)
    try:
        result = await agent.run(request, ctx, sink)
    except (LLMError, CostCapReached) as exc:
        await response.write(f'<span class="bad">{escape(mask(str(exc)))}</span>'.encode())
        return log | {"outcome": f"error: {type(exc).__name__}"}
    final = await parts.safety.answer(message, result.text)
    if final != result.text:
        await response.write(f'<hr><span id="withheld">{escape(final)}</span>'.encode())
    elif not sink.chunks:  # the chain answered without streaming: the whole text at once
        await sink.text(final)
    await history.append(
        conv,
        HistoryEntry(role="user", text=message.text, author_id=message.author.id),
        HistoryEntry(role="assistant", text=final),
    )
    usage = result.usage
    prices = parts.prices or PriceTable.default()
    return log | {
        "outcome": "answered" if final == result.text else "withheld by the safety check",
        "model": request.model,
        "prompt_tokens": usage.total_input_tokens,
        "cache_share": usage.cache_read_share,
        "output_tokens": usage.output_tokens,
        "tools": sink.tools,
        "tool_calls": result.tool_calls,
        "latency_ms": round((time.perf_counter() - started) * 1000),
        "cost": prices.cost(request.model, usage),
        "chunks": sink.chunks,
    }
