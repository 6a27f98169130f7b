"""One analysis: the prompt, the structured answer, its validation, and provenance.

The insights model reads a user's recent conversations and proposes pins (facts the user stated
about themselves) and recommendations (how to help them). Its answer is JSON for the schema of
``Analysis`` (sent as ``LLMRequest.response_schema``), parsed and validated with pydantic; an
invalid answer gets one retry that quotes the error, then the analysis is dropped.

Provenance is enforced here, in code, not only asked for in the prompt: every line is shown
with a short label (``L1``, ``L2``...) and marked ``own="yes"`` only when the subject wrote it
(same platform, same user id). A proposal must cite one of those labels, or it is dropped --
so "Alice is vegan" said by Bob can never become Alice's pin, whatever the model answers.
Labels rather than message ids keep the answer short and leave nothing for the model to
mistype or invent.

The instructions, the frame of the request and the retry are ``prompts/insights/*``; the field
descriptions of the schema stay with the schema (like a tool's docstring, they are its schema).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

import prompts
from bot.events import ConversationKey
from bot.llm.base import Provider
from bot.llm.types import CachePoint, LLMRequest, LLMResponse, Message, TextPart, Usage
from bot.memory.buffers import PIN_TEXT_MAX, REC_TEXT_MAX, UserBuffer, clean_text, clip
from bot.state.history import HistoryEntry

log = logging.getLogger("chorus.insights.analyse")

MAX_PIN_PROPOSALS = 10
MAX_REC_PROPOSALS = 3
LINE_CHARS = 500
NAME_CHARS = 48
MAX_OUTPUT_TOKENS = 1024
_ERROR_CHARS = 300


# -- the structured answer ---------------------------------------------------------------------
class PinProposal(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)  # built at the first job

    op: Literal["add", "update", "replace", "keep"]
    target: int | None = Field(
        default=None, description="number of the current pin for update/replace/keep; else null"
    )
    text: str = Field(
        default="",
        description=f"the fact, at most {PIN_TEXT_MAX} characters, third person, no name",
    )
    source_line: str | None = Field(
        default=None, description='id of the subject\'s own line (own="yes") stating it, e.g. L3'
    )
    confidence: float = Field(default=0.0, ge=0, le=1)


class RecProposal(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)  # built at the first job

    text: str = Field(description=f"a tip, at most {REC_TEXT_MAX} characters")
    tool: str | None = Field(default=None, description="the tool the tip is about, or null")
    source_line: str | None = Field(
        default=None, description="id of the subject's own line that shows it"
    )


class Analysis(BaseModel):
    model_config = ConfigDict(extra="ignore", defer_build=True)  # built at the first job

    pins: list[PinProposal] = Field(default_factory=list)
    recommendations: list[RecProposal] = Field(default_factory=list)


def response_schema() -> dict[str, Any]:
    """``Analysis`` as a self-contained strict JSON schema (no ``$ref``, every property
    required, no extra properties), the subset all three vendors accept."""
    schema = Analysis.model_json_schema()
    defs = schema.pop("$defs", {})
    strict: dict[str, Any] = _strict(schema, defs)
    return strict


def _strict(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_strict(item, defs) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        return _strict(defs[node["$ref"].rsplit("/", 1)[-1]], defs)
    out = {k: _strict(v, defs) for k, v in node.items() if k not in ("title", "default")}
    if out.get("type") == "object" and "properties" in out:
        out["required"] = list(out["properties"])
        out["additionalProperties"] = False
    return out


def parse_analysis(text: str) -> Analysis:
    """The answer as an ``Analysis``; raises ValueError (or ValidationError) when it is not."""
    body = text.strip()
    if body.startswith("```"):  # some models fence JSON even when asked not to
        body = body.strip("`").removeprefix("json").strip()
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end < start:
        raise ValueError(prompts.render("insights/no_json"))
    analysis = Analysis.model_validate(json.loads(body[start : end + 1]))
    return analysis.model_copy(
        update={
            "pins": analysis.pins[:MAX_PIN_PROPOSALS],
            "recommendations": analysis.recommendations[:MAX_REC_PROPOSALS],
        }
    )


# -- the prompt --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Line:
    """One history entry as the model sees it."""

    label: str
    conversation: ConversationKey
    entry: HistoryEntry
    own: bool


def label_lines(
    platform: str,
    user_id: str,
    histories: Sequence[tuple[ConversationKey, Sequence[HistoryEntry]]],
) -> list[Line]:
    """Label every entry; ``own`` only for the subject's user lines (provenance)."""
    lines: list[Line] = []
    for conv, entries in histories:
        for entry in entries:
            own = (
                entry.role == "user"
                and conv.platform == platform
                and entry.author_id == user_id
                and entry.message_id is not None
            )
            lines.append(Line(f"L{len(lines) + 1}", conv, entry, own))
    return lines


def build_request(
    model: str,
    *,
    platform: str,
    display_name: str,
    buffer: UserBuffer,
    lines: Sequence[Line],
) -> LLMRequest:
    """The analysis request: the static prompt (cached), then this user's data."""
    name = _name(display_name or buffer.user_id)
    pins = [
        f"[{n}] (confidence {pin.confidence:.2f}) {_data(pin.text)}"
        for n, pin in enumerate(buffer.pins, 1)
    ]
    recs = [
        f"- {_data(rec.text)}" + (f" (tool: {_data(rec.tool)})" if rec.tool else "")
        for rec in buffer.recommendations
    ]
    parts: list[str] = []
    current: ConversationKey | None = None
    for line in lines:
        if line.conversation != current:
            if current is not None:
                parts.append("</conversation>")
            parts.append(f'<conversation where="{_name(str(line.conversation))}">')
            current = line.conversation
        parts.append(_render_line(line))
    if current is not None:
        parts.append("</conversation>")
    text = prompts.render(
        "insights/request",
        platform=platform,
        name=name,
        pins="\n".join(pins),
        recommendations="\n".join(recs),
        conversations="\n".join(parts),
    )
    return LLMRequest(
        model=model,
        system=(TextPart(text=prompts.render("insights/instructions")), CachePoint()),
        messages=(Message.user(text),),
        max_tokens=MAX_OUTPUT_TOKENS,
        temperature=0.2,
        cache_key="chorus-insights",
        response_schema=response_schema(),
    )


def _render_line(line: Line) -> str:
    text = _data(clip(clean_text(line.entry.text), LINE_CHARS))
    if line.entry.role == "assistant":
        return f'<line id="{line.label}" from="assistant">{text}</line>'
    who = _name(line.entry.author_name or line.entry.author_id or "someone")
    own = "yes" if line.own else "no"
    return f'<line id="{line.label}" from="{who}" own="{own}">{text}</line>'


def _data(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _name(text: str) -> str:
    return clip(clean_text(text), NAME_CHARS).translate(str.maketrans("", "", '"<>&'))


# -- one analysis, with one retry for an invalid answer ---------------------------------------
@dataclass(frozen=True)
class AnalysisResult:
    analysis: Analysis | None  # None: invalid twice, dropped
    usage: Usage
    calls: int


async def analyse(provider: Provider, request: LLMRequest) -> AnalysisResult:
    """Ask, validate, retry once if invalid. Provider errors propagate to the caller."""
    response = await provider.complete(request)
    usage = response.usage
    try:
        return AnalysisResult(checked_answer(response), usage, 1)
    except (ValueError, ValidationError) as exc:
        log.info("invalid insights answer; asking once more", exc_info=True)
        retry = retry_request(request, response.text, exc)
    second = await provider.complete(retry)
    usage = usage + second.usage
    try:
        return AnalysisResult(checked_answer(second), usage, 2)
    except (ValueError, ValidationError):
        log.warning("invalid insights answer after one retry; analysis dropped", exc_info=True)
        return AnalysisResult(None, usage, 2)


def retry_request(request: LLMRequest, answer: str, error: Exception) -> LLMRequest:
    """The request again, with the invalid answer and a message that quotes what was wrong."""
    said = answer.strip() or prompts.render("insights/empty_answer")
    retry = prompts.render("insights/retry", error=str(error)[:_ERROR_CHARS])
    return request.model_copy(
        update={"messages": (*request.messages, Message.assistant(said), Message.user(retry))}
    )


def checked_answer(response: LLMResponse) -> Analysis:
    """The answer as an ``Analysis``; raises ValueError (quoted in the retry) when it is not."""
    if response.stop_reason == "max_tokens":
        raise ValueError(prompts.render("insights/cut_off"))
    return parse_analysis(response.text)


# -- provenance --------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProposedPin:
    op: Literal["add", "update", "replace", "keep"]
    target: int | None
    text: str
    message_id: str
    confidence: float


@dataclass(frozen=True)
class ProposedRec:
    text: str
    tool: str | None
    message_id: str


def check_provenance(
    analysis: Analysis, lines: Sequence[Line]
) -> tuple[list[ProposedPin], list[ProposedRec], int]:
    """Keep the proposals citing one of the subject's own lines; returns (pins, recs, dropped).
    ``keep`` needs no source: it changes nothing."""
    own = {line.label: line for line in lines if line.own}
    pins: list[ProposedPin] = []
    recs: list[ProposedRec] = []
    dropped: list[str] = []
    for pin in analysis.pins:
        if pin.op == "keep":
            pins.append(ProposedPin("keep", pin.target, pin.text, "", pin.confidence))
            continue
        line = own.get((pin.source_line or "").strip())
        if line is None or line.entry.message_id is None:
            dropped.append(f"pin:{pin.source_line}")
            continue
        pins.append(
            ProposedPin(pin.op, pin.target, pin.text, line.entry.message_id, pin.confidence)
        )
    for rec in analysis.recommendations:
        line = own.get((rec.source_line or "").strip())
        if line is None or line.entry.message_id is None:
            dropped.append(f"rec:{rec.source_line}")
            continue
        recs.append(ProposedRec(rec.text, rec.tool, line.entry.message_id))
    if dropped:
        log.warning(
            "dropped insights proposals not sourced from the subject's own lines",
            extra={"dropped": ",".join(dropped)[:200], "count": len(dropped)},
        )
    return pins, recs, len(dropped)
