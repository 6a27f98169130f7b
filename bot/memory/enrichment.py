"""The volatile tail of a prompt: who is speaking, where, when, and what we remember of them.

The block goes after the cached prefix (it changes every turn: the time, the selected notes), so
it never breaks the cache. Everything in it that a user could influence -- the display name,
pins and recommendations the insights agent wrote from their words -- is data, not
instructions: it is reduced to one printable line per entry, ``&``/``<``/``>`` become entities
so no text can close the block or open a new tag, each entry is length-limited, and the whole
block stays within CHORUS_CONTEXT_CHARS. The system prompt already tells the model that
``<context>`` holds data.

The block's frame and hints are ``prompts/memory/context*``; the data lines inside it are laid
out here, next to the escaping that keeps them data.

A conversation's summaries and community notes (``bot.memory.summaries``) join the block when the
turn's read brought them, each section under its own budget (``bot.memory.summaries_context``).

Only the speaker's own notes can appear: the buffer must belong to the message's author
(platform + user id), otherwise the block is rendered without any notes and an error is logged.
"""

from __future__ import annotations

import logging
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import prompts
from bot.events import ChatMessage
from bot.memory.buffers import (
    PIN_TEXT_MAX,
    REC_TEXT_MAX,
    MemorySettings,
    Pin,
    Recommendation,
    UserBuffer,
    clean_text,
    clip,
)
from bot.memory.relevance import Scored, Scorer, select
from bot.memory.summaries import ChannelMemory
from bot.memory.summaries_context import community_block, summaries_block
from bot.memory.vectors import Recalled

log = logging.getLogger("chorus.enrichment")

NAME_MAX = 48
_ATTR_UNSAFE = str.maketrans("", "", '"<>&')


def zone(name: str | None) -> ZoneInfo | None:
    """The IANA zone ``name``, or None when unknown or unset."""
    if not name:
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None


def selected(
    buffer: UserBuffer, text: str, settings: MemorySettings, recall: Recalled | None = None
) -> tuple[list[Scored[Pin]], list[Scored[Recommendation]]]:
    """The pins and recommendations relevant to ``text`` (see ``bot.memory.relevance``); with
    a query vector in ``recall``, by the hybrid score (``bot.memory.vectors``)."""
    if not buffer.pins and not buffer.recommendations:
        return [], []  # most users most of the time: no need to tokenise the message
    pins = sorted(buffer.pins, key=lambda p: (-p.confidence, -p.updated_at.timestamp()))
    recs = sorted(buffer.recommendations, key=lambda r: -r.created_at.timestamp())
    corpus = [p.text for p in pins] + [_rec_terms(r) for r in recs]
    lexical = Scorer(text, corpus)
    scorer = recall.scorer(lexical, settings) if recall is not None else lexical
    hybrid = scorer is not lexical
    return (
        select(
            scorer,
            pins,
            lambda p: p.text,
            threshold=settings.recall_threshold if hybrid else settings.pin_threshold,
            limit=settings.prompt_pins,
        ),
        select(
            scorer,
            recs,
            _rec_terms,
            threshold=settings.recall_threshold if hybrid else settings.rec_threshold,
            limit=settings.prompt_recs,
        ),
    )


def note_texts(buffer: UserBuffer) -> list[str]:
    """The texts relevance scores a buffer's notes by (what ``bot.memory.recall`` embeds)."""
    return [p.text for p in buffer.pins] + [_rec_terms(r) for r in buffer.recommendations]


def render_context(
    buffer: UserBuffer,
    message: ChatMessage,
    settings: MemorySettings,
    now: datetime,
    recall: Recalled | None = None,
    channel_memory: ChannelMemory | None = None,
) -> str:
    """The ``<context>`` block for ``message``: deterministic for the same inputs."""
    name = clean_text((message.author.display_name or message.author.id).translate(_ATTR_UNSAFE))
    header = {
        "platform": message.platform,
        "user": clip(name, NAME_MAX),
        "time": _time(now, buffer.timezone),
    }
    pins: list[str] = []
    recs: list[str] = []
    if (buffer.platform, buffer.user_id) != (message.platform, message.author.id):
        log.error(
            "memory of another user offered for a prompt; leaving it out",
            extra={"platform": message.platform, "message_id": message.id},
        )
        return _assemble(header, pins, recs, _channel(channel_memory, message, settings, recall))
    chosen_pins, chosen_recs = selected(buffer, message.text, settings, recall)
    for pin in chosen_pins:
        line = "- " + _data(clip(clean_text(pin.item.text), PIN_TEXT_MAX))
        if len(_assemble(header, [*pins, line], recs)) <= settings.context_chars:
            pins.append(line)
    for rec in chosen_recs:
        text = clip(clean_text(rec.item.text), REC_TEXT_MAX)
        tool = f" (tool: {_data(clean_text(rec.item.tool))})" if rec.item.tool else ""
        line = "- " + _data(text) + tool
        if len(_assemble(header, pins, [*recs, line])) <= settings.context_chars:
            recs.append(line)
    return _assemble(header, pins, recs, _channel(channel_memory, message, settings, recall))


def _channel(
    channel_memory: ChannelMemory | None,
    message: ChatMessage,
    settings: MemorySettings,
    recall: Recalled | None,
) -> dict[str, str]:
    if channel_memory is None:
        return {}
    text, vectors = message.text, channel_memory.vectors
    return {
        "summaries": summaries_block(channel_memory.summaries, text, settings, recall, vectors),
        "community": community_block(channel_memory.community, text, settings, recall, vectors),
    }


def _assemble(
    header: dict[str, str],
    pins: list[str],
    recs: list[str],
    extra: dict[str, str] | None = None,
) -> str:
    return prompts.render(
        "memory/context",
        **header,
        summaries=(extra or {}).get("summaries", ""),
        community=(extra or {}).get("community", ""),
        pins=prompts.render("memory/context_pins", lines="\n".join(pins)) if pins else "",
        recommendations=(
            prompts.render("memory/context_recommendations", lines="\n".join(recs)) if recs else ""
        ),
    )


def _time(now: datetime, zone_name: str | None) -> str:
    tz = zone(zone_name)
    if tz is None:
        moment = now.astimezone(ZoneInfo("UTC"))
        return prompts.render("memory/time_unknown_zone", time=f"{moment:%Y-%m-%d %H:%M %A}")
    moment = now.astimezone(tz)
    offset = moment.strftime("%z")
    return prompts.render(
        "memory/time",
        time=f"{moment:%Y-%m-%d %H:%M %A}",
        zone=zone_name or "",
        offset=f"{offset[:3]}:{offset[3:]}",
    )


def data_text(text: str) -> str:
    """``text`` with ``&``, ``<`` and ``>`` as entities: it cannot open or close a tag."""
    return _data(text)


def _data(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _rec_terms(rec: Recommendation) -> str:
    tool = (rec.tool or "").replace("_", " ").replace("-", " ")
    return f"{rec.text} {tool}".strip()
