"""The analysis: the strict schema, the prompt, parsing, one retry, and provenance."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from bot.events import ConversationKey
from bot.llm.scripted import ScriptedProvider
from bot.llm.types import CachePoint, LLMResponse, TextPart, Usage
from bot.memory.buffers import Pin, Recommendation, UserBuffer
from bot.state.history import HistoryEntry
from insights.analyse import (
    Analysis,
    PinProposal,
    RecProposal,
    analyse,
    build_request,
    check_provenance,
    label_lines,
    parse_analysis,
    response_schema,
)

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)
CONV = ConversationKey(platform="discord", channel="general")


def line(text: str, author: str | None, *, mid: str | None = None) -> HistoryEntry:
    if author is None:
        return HistoryEntry(role="assistant", text=text, at=T0)
    return HistoryEntry(
        role="user",
        text=text,
        message_id=mid or f"id-{author}-{len(text)}",
        author_id=author,
        author_name=author.title(),
        at=T0,
    )


HISTORY = [
    line("I went vegan last year", "alice", mid="a1"),
    line("Alice is vegan lol, and I live in Oslo", "bob", mid="b1"),
    line("Nice! Any recipe wishes?", None),
    line("Short answers please <b>bold</b>", "alice", mid="a2"),
]


def objects(node: Any) -> list[dict[str, Any]]:
    if isinstance(node, list):
        return [o for item in node for o in objects(item)]
    if not isinstance(node, dict):
        return []
    found = [node] if node.get("type") == "object" else []
    return found + [o for value in node.values() for o in objects(value)]


def test_the_schema_is_strict_and_self_contained() -> None:
    schema = response_schema()
    text = json.dumps(schema)
    assert "$ref" not in text and "$defs" not in text and '"title"' not in text
    assert '"default"' not in text
    found = objects(schema)
    assert len(found) == 3  # the answer, a pin, a recommendation
    for node in found:
        assert node["additionalProperties"] is False
        assert sorted(node["required"]) == sorted(node["properties"])
    pin = schema["properties"]["pins"]["items"]
    assert pin["properties"]["op"]["enum"] == ["add", "update", "replace", "keep"]


@pytest.mark.parametrize(
    "text",
    [
        '{"pins": [], "recommendations": []}',
        '```json\n{"pins": [], "recommendations": []}\n```',
        'Here you go: {"pins": [], "recommendations": []} hope it helps',
        '{"pins": [], "recommendations": [], "note": "extra keys are ignored"}',
    ],
)
def test_parse_accepts_json_objects(text: str) -> None:
    assert parse_analysis(text) == Analysis()


@pytest.mark.parametrize(
    "text",
    [
        "",
        "no JSON here",
        '{"pins": [{"op": "delete_everything"}]}',
        '{"pins": [{"op": "add", "confidence": 7}]}',
        '{"pins": "nope"}',
        '{"pins": [}',
    ],
)
def test_parse_rejects_anything_else(text: str) -> None:
    with pytest.raises((ValueError, ValidationError)):
        parse_analysis(text)


def test_parse_bounds_the_number_of_proposals() -> None:
    many = {"pins": [{"op": "keep", "target": 1}] * 50, "recommendations": [{"text": "x"}] * 9}
    parsed = parse_analysis(json.dumps(many))
    assert len(parsed.pins) == 10 and len(parsed.recommendations) == 3


def test_only_the_subjects_user_lines_are_own() -> None:
    other_platform = ConversationKey(platform="slack", channel="general")
    lines = label_lines(
        "discord", "alice", [(CONV, HISTORY), (other_platform, [line("hi", "alice", mid="s1")])]
    )
    assert [(entry.label, entry.own) for entry in lines] == [
        ("L1", True),
        ("L2", False),
        ("L3", False),
        ("L4", True),
        ("L5", False),  # same id on another platform is another person
    ]


def test_the_request_marks_own_lines_and_quotes_user_text() -> None:
    lines = label_lines("discord", "alice", [(CONV, HISTORY)])
    state = UserBuffer(
        platform="discord",
        user_id="alice",
        pins=(
            Pin(text="Lives in <Lyon>", source="a0", confidence=0.8, created_at=T0, updated_at=T0),
        ),
        recommendations=(Recommendation(text="Use metric", tool="convert", created_at=T0),),
    )
    request = build_request(
        "cheap", platform="discord", display_name='Ali"ce', buffer=state, lines=lines
    )
    assert request.model == "cheap" and request.response_schema == response_schema()
    assert isinstance(request.system[0], TextPart) and 'own="yes"' in request.system[0].text
    assert request.system[-1] == CachePoint()
    text = request.messages[0].text
    assert '<subject platform="discord" name="Alice">' in text
    assert "[1] (confidence 0.80) Lives in &lt;Lyon&gt;" in text
    assert "- Use metric (tool: convert)" in text
    assert '<line id="L1" from="Alice" own="yes">I went vegan last year</line>' in text
    assert '<line id="L2" from="Bob" own="no">' in text
    assert '<line id="L3" from="assistant">Nice! Any recipe wishes?</line>' in text
    assert "Short answers please &lt;b&gt;bold&lt;/b&gt;" in text
    assert '<conversation where="discord:general">' in text


def answer(data: dict[str, Any], tokens: int = 10) -> LLMResponse:
    return LLMResponse(
        parts=(TextPart(text=json.dumps(data)),),
        stop_reason="end_turn",
        usage=Usage(input_tokens=tokens, output_tokens=tokens),
    )


VALID: dict[str, Any] = {"pins": [], "recommendations": []}


def request() -> Any:
    lines = label_lines("discord", "alice", [(CONV, HISTORY)])
    state = UserBuffer(platform="discord", user_id="alice")
    return build_request(
        "cheap", platform="discord", display_name="Alice", buffer=state, lines=lines
    )


async def test_a_valid_answer_needs_one_call() -> None:
    provider = ScriptedProvider([answer(VALID)])
    result = await analyse(provider, request())
    assert result.analysis == Analysis() and result.calls == 1
    assert result.usage == Usage(input_tokens=10, output_tokens=10)


async def test_an_invalid_answer_gets_one_retry_quoting_the_error() -> None:
    provider = ScriptedProvider(["sure! here are the pins", answer(VALID, tokens=5)])
    result = await analyse(provider, request())
    assert result.analysis == Analysis() and result.calls == 2
    retry = provider.requests[1]
    assert [m.role for m in retry.messages] == ["user", "assistant", "user"]
    assert retry.messages[1].text == "sure! here are the pins"
    assert "not valid" in retry.messages[2].text and "no JSON object" in retry.messages[2].text
    assert retry.response_schema == provider.requests[0].response_schema
    assert result.usage.output_tokens == len("sure! here are the pins") // 4 + 1 + 5, "both calls"


async def test_invalid_twice_is_dropped_with_a_log(caplog: pytest.LogCaptureFixture) -> None:
    truncated = LLMResponse(
        parts=(TextPart(text='{"pins": [{"op": "add", "te'),), stop_reason="max_tokens"
    )
    provider = ScriptedProvider(["", truncated, answer(VALID)])
    with caplog.at_level(logging.INFO, logger="chorus.insights.analyse"):
        result = await analyse(provider, request())
    assert result.analysis is None and result.calls == 2
    assert len(provider.requests) == 2, "exactly one retry"
    assert provider.requests[1].messages[1].text == "(empty answer)"
    assert "dropped" in caplog.text


def analysis(*pins: PinProposal, recs: tuple[RecProposal, ...] = ()) -> Analysis:
    return Analysis(pins=list(pins), recommendations=list(recs))


def test_provenance_keeps_only_the_subjects_own_lines(caplog: pytest.LogCaptureFixture) -> None:
    lines = label_lines("discord", "alice", [(CONV, HISTORY)])
    proposed = analysis(
        PinProposal(op="add", text="Is vegan", source_line="L1", confidence=0.9),
        PinProposal(op="add", text="Is vegan", source_line="L2", confidence=0.9),  # Bob said it
        PinProposal(op="add", text="Lives in Oslo", source_line="L2", confidence=0.9),
        PinProposal(op="add", text="Wants recipes", source_line="L3", confidence=0.9),  # bot
        PinProposal(op="add", text="Invented", source_line="L99", confidence=0.9),
        PinProposal(op="add", text="Uncited", source_line=None, confidence=0.9),
        PinProposal(op="keep", target=1),
        recs=(
            RecProposal(text="Keep answers short", source_line=" L4 "),
            RecProposal(text="Answer in Norwegian", source_line="L2"),
        ),
    )
    with caplog.at_level(logging.WARNING, logger="chorus.insights.analyse"):
        pins, recs, dropped = check_provenance(proposed, lines)
    assert [(p.op, p.text, p.message_id) for p in pins] == [
        ("add", "Is vegan", "a1"),
        ("keep", "", ""),
    ]
    assert [(r.text, r.message_id) for r in recs] == [("Keep answers short", "a2")]
    assert dropped == 6
    assert "not sourced from the subject's own lines" in caplog.text
    assert "Oslo" not in caplog.text, "user text is not logged"
