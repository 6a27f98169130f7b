"""Conversation summaries: fold a conversation's older lines into one summary per UTC day.

Which lines: the history's lines after the last one summarised (the job's ``mark``), from the
oldest on, while each has left the history window or belongs to a day that is over. A reply belongs to the day
of the line it answered (a turn is never split across two summaries). At most
``MAX_LINES_PER_RUN`` per run; the rest wait for the next one.

Per day: one structured-output call (``{"summary": "..."}``) with that day's earlier summary,
if any, so the new one covers both; one retry quoting the error when the answer is invalid
(``insights.analyse.retry_request``). The summary keeps its provenance: the user ids whose lines
fed it, the times of its first and last line, how many lines. Then, when the scope has
community memory on, ``insights.community`` updates the notes from the same lines.

The write is one ``WATCH``ed transaction over the summaries, the notes and the ``/forget``
tombstones of every author in the batch: if one of them said ``/forget`` after the run began,
nothing is written (their lines are gone from the pending list already; the next run summarises
what is left). Otherwise the summaries (pruned to the scope's TTL days) and notes are stored
with that TTL, each author's summary index learns the conversation (for ``/forget``), the
summarised lines past the window leave the history (``LREM`` by value, so lines appended or
forgotten meanwhile are never hit), and the mark moves to the last line summarised.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import prompts
from bot.events import ConversationKey
from bot.llm.base import Provider
from bot.llm.types import CachePoint, LLMRequest, LLMResponse, Message, TextPart, Usage
from bot.memory.buffers import clean_text, clip
from bot.memory.summaries import (
    MAX_SUMMARIES,
    SUMMARY_TEXT_MAX,
    Community,
    Summary,
    day_of,
    dump_community,
    dump_summaries,
    load_community,
    load_summaries,
)
from bot.memory.summaries_context import data
from bot.state.history import HistoryEntry
from bot.state.summaries import Stored, SummaryWrite
from insights.analyse import _strict, retry_request  # one strict-schema rule for all vendors

log = logging.getLogger("chorus.insights.summaries")

MAX_LINES_PER_RUN = 200
LINE_CHARS = 300
NAME_CHARS = 48
MAX_OUTPUT_TOKENS = 600

M = TypeVar("M", bound=BaseModel)


class SummaryAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)  # built at the first job

    summary: str = Field(
        description=f"the day's summary, at most {SUMMARY_TEXT_MAX} characters; empty if nothing"
    )


# -- which lines ---------------------------------------------------------------------------------
def turn_days(entries: Sequence[HistoryEntry]) -> list[str]:
    """The UTC day of each entry; a reply takes the day of the user line before it."""
    days: list[str] = []
    current: str | None = None
    for entry in entries:
        if entry.role == "user" or current is None:
            current = day_of(entry.at)
        days.append(current)
    return days


def after_mark(
    lines: Sequence[tuple[str, HistoryEntry]], mark: str | None
) -> list[tuple[str, HistoryEntry]]:
    """The lines after the last one summarised (the mark, kept in the history as the anchor);
    all of them without a mark, or when the mark line was deleted meanwhile (a /forget, a
    platform deletion): a few lines may then be summarised twice, none is skipped."""
    values = [raw for raw, _ in lines]
    if not mark or mark not in values:
        return list(lines)
    return list(lines[values.index(mark) + 1 :])


def due_lines(pending: Sequence[tuple[str, HistoryEntry]], window: set[str], today: str) -> int:
    """How many pending lines, from the oldest, are ready: out of the history window, or of a
    day that is over (capped at ``MAX_LINES_PER_RUN``)."""
    days = turn_days([entry for _, entry in pending])
    ready = 0
    for (raw, _), day in zip(pending, days, strict=True):
        if raw in window and day >= today:
            break
        ready += 1
    return min(ready, MAX_LINES_PER_RUN)


def authors(entries: Sequence[HistoryEntry]) -> list[str]:
    """The user ids whose lines are among ``entries``, in order of first appearance."""
    return list(dict.fromkeys(e.author_id for e in entries if e.role == "user" and e.author_id))


# -- the request ---------------------------------------------------------------------------------
def render_lines(entries: Sequence[HistoryEntry], *, labels: bool = False) -> str:
    """Lines as the insights model sees them: data, one per line, labelled ``L1``... if asked."""
    out = []
    for n, entry in enumerate(entries, 1):
        text = data(clip(clean_text(entry.text), LINE_CHARS))
        label = f' id="L{n}"' if labels else ""
        if entry.role == "assistant":
            out.append(f'<line{label} from="assistant">{text}</line>')
            continue
        who = name(entry.author_name or entry.author_id or "someone")
        out.append(f'<line{label} from="{who}" at="{entry.at:%H:%M}">{text}</line>')
    return "\n".join(out)


def name(text: str) -> str:
    return clip(clean_text(text), NAME_CHARS).translate(str.maketrans("", "", '"<>&'))


def summary_request(
    model: str,
    conv: ConversationKey,
    day: str,
    earlier: Summary | None,
    entries: Sequence[HistoryEntry],
) -> LLMRequest:
    text = prompts.render(
        "insights/summary_request",
        day=day,
        where=name(str(conv)),
        earlier=data(clean_text(earlier.text)) if earlier else "",
        lines=render_lines(entries),
    )
    return structured_request(model, "insights/summary_instructions", text, SummaryAnswer)


def structured_request(
    model: str, instructions: str, text: str, schema: type[BaseModel]
) -> LLMRequest:
    """A cached static instruction, this batch's data, and ``schema`` as the strict answer."""
    raw = schema.model_json_schema()
    return LLMRequest(
        model=model,
        system=(TextPart(text=prompts.render(instructions)), CachePoint()),
        messages=(Message.user(text),),
        max_tokens=MAX_OUTPUT_TOKENS,
        temperature=0.2,
        cache_key=f"chorus-{instructions.rsplit('/', 1)[-1]}",
        response_schema=_strict(raw, raw.pop("$defs", {})),
    )


async def ask(
    provider: Provider, request: LLMRequest, parse: Callable[[LLMResponse], M]
) -> tuple[M | None, Usage]:
    """Ask, validate with ``parse``, retry once quoting the error; None when invalid twice.
    Provider errors propagate."""
    response = await provider.complete(request)
    usage = response.usage
    try:
        return parse(response), usage
    except (ValueError, ValidationError) as exc:
        log.info("invalid summary answer; asking once more", exc_info=True)
        retry = retry_request(request, response.text, exc)
    second = await provider.complete(retry)
    usage = usage + second.usage
    try:
        return parse(second), usage
    except (ValueError, ValidationError):
        log.warning("invalid summary answer after one retry; dropped", exc_info=True)
        return None, usage


def json_answer(schema: type[M]) -> Callable[[LLMResponse], M]:
    """A parser of ``schema`` from an answer (fences and prose around the object tolerated)."""

    def parse(response: LLMResponse) -> M:
        if response.stop_reason == "max_tokens":
            raise ValueError(prompts.render("insights/cut_off"))
        body = response.text.strip()
        start, end = body.find("{"), body.rfind("}")
        if start < 0 or end < start:
            raise ValueError(prompts.render("insights/no_json"))
        return schema.model_validate(json.loads(body[start : end + 1]))

    return parse


# -- folding a day in ----------------------------------------------------------------------------
def fold(
    summaries: Sequence[Summary],
    day: str,
    text: str,
    entries: Sequence[HistoryEntry],
    *,
    keep_since: str,
) -> tuple[Summary, ...]:
    """``summaries`` with ``day``'s replaced by one that also covers ``entries``; days before
    ``keep_since`` and beyond ``MAX_SUMMARIES`` (the oldest) dropped."""
    earlier = next((s for s in summaries if s.day == day), None)
    others = [s for s in summaries if s.day != day]
    text = clip(clean_text(text), SUMMARY_TEXT_MAX)
    if text:
        times = [e.at for e in entries] + ([earlier.first, earlier.last] if earlier else [])
        users = list(earlier.users if earlier else ()) + authors(entries)
        others.append(
            Summary(
                day=day,
                text=text,
                users=tuple(dict.fromkeys(users)),
                first=min(times),
                last=max(times),
                lines=(earlier.lines if earlier else 0) + len(entries),
            )
        )
    elif earlier is not None:
        others.append(earlier)  # nothing new worth keeping: the day's summary stays
    kept = sorted((s for s in others if s.day >= keep_since), key=lambda s: s.day)
    return tuple(kept[-MAX_SUMMARIES:])


def composer(
    *,
    days: dict[str, tuple[str, list[HistoryEntry]]],
    community: Callable[[Community], Community] | None,
    remove: Sequence[str],
    mark: str,
    users: Sequence[str],
    ttl_days: int,
    job_ttl: int,
    now: datetime,
) -> Callable[[Stored], SummaryWrite]:
    """What a run writes, from what is stored when it writes (``SummaryStore.write`` calls it
    inside its transaction): each day's summary folded in, the notes updated, the lines that
    fed them out of the history, and the index of every user whose lines are now cited."""
    keep_since = day_of(now - timedelta(days=ttl_days))

    def compose(stored: Stored) -> SummaryWrite:
        summaries = load_summaries(stored.summaries)
        for day, (text, entries) in sorted(days.items()):
            summaries = fold(summaries, day, text, entries, keep_since=keep_since)
        notes = community(load_community(stored.notes)) if community is not None else None
        cited = set(users) & (
            {u for s in summaries for u in s.users} | (notes.users if notes else set())
        )
        return SummaryWrite(
            summaries=dump_summaries(summaries) if summaries else None,
            notes=dump_community(notes) if notes is not None else None,
            remove=remove,
            mark=mark,
            cited=sorted(cited),
            ttl_seconds=ttl_days * 24 * 3600,
            job_ttl_seconds=job_ttl,
            at=now,
        )

    return compose
