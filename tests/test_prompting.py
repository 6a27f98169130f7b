"""Prompt assembly: layout, cache points, attachments and the volatile tail."""

from __future__ import annotations

from typing import Any

import pytest

from bot.agent import prompting
from bot.agent.prompting import PromptAssembler
from bot.events import Attachment, AttachmentKind, Author, ChatMessage, ConversationKey
from bot.llm.types import CachePoint, ImagePart, LLMResponse, Message, TextPart, ToolCallPart
from bot.state.history import HistoryEntry

CONV = ConversationKey(platform="discord", channel="1")


def _message(**extra: Any) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id="9",
        conversation=CONV,
        author=Author(id="7", display_name="Ada"),
        text="look",
        **extra,
    )


def test_images_reach_the_model_and_files_are_described() -> None:
    message = _message(
        attachments=(
            Attachment(
                kind=AttachmentKind.IMAGE, url="https://cdn.example/cat.png", mime="image/png"
            ),
            Attachment(kind=AttachmentKind.IMAGE, data=b"\x89PNG", mime="image/png"),
            Attachment(
                kind=AttachmentKind.FILE, filename="notes.pdf", mime="application/pdf", size=2048
            ),
        )
    )
    request = PromptAssembler(model="m", system_prompt="S").build(message, [])
    parts = request.messages[-1].parts
    assert parts[1] == ImagePart(mime="image/png", url="https://cdn.example/cat.png")
    assert parts[2] == ImagePart(mime="image/png", data=b"\x89PNG")
    assert parts[3] == TextPart(text="[attachment: notes.pdf (application/pdf, 2 KB)]")


def test_without_vision_images_are_described() -> None:
    message = _message(
        attachments=(
            Attachment(kind=AttachmentKind.IMAGE, url="u", mime="image/gif", filename="a.gif"),
        )
    )
    request = PromptAssembler(model="m", system_prompt="S", vision=False).build(message, [])
    assert request.messages[-1].parts[1] == TextPart(text="[attachment: a.gif (image/gif)]")


def test_layout_cache_points_and_context_after_them() -> None:
    history = [
        HistoryEntry(role="user", text="hi", message_id="1", author_id="7", author_name="Ada"),
        HistoryEntry(
            role="assistant", text="hello", message_id=None, author_id=None, author_name=""
        ),
    ]
    request = PromptAssembler(model="m", system_prompt="S").build(
        _message(), history, context="<context>volatile</context>"
    )
    assert request.system == (TextPart(text="S"), CachePoint())
    assert [m.role for m in request.messages] == ["user", "assistant", "user"]
    assert request.messages[1].parts[-1] == CachePoint()  # end of history
    assert request.messages[2].parts[-1] == TextPart(text="<context>volatile</context>")
    assert request.cache_key == "discord:1"


def test_unanswered_user_lines_merge_with_the_new_message_after_a_cache_point() -> None:
    history = [
        HistoryEntry(role="user", text="anyone?", message_id="1", author_id="8", author_name="Bob")
    ]
    request = PromptAssembler(model="m", system_prompt="S").build(_message(), history)
    [only] = request.messages
    assert isinstance(only.parts[1], CachePoint) and "look" in only.parts[2].text  # type: ignore[union-attr]


def test_events_with_binary_attachments_survive_json() -> None:
    message = _message(attachments=(Attachment(kind=AttachmentKind.IMAGE, data=bytes(range(256))),))
    assert ChatMessage.model_validate_json(message.model_dump_json()) == message


def test_rendering_history_again_gives_identical_bytes_from_reused_parts() -> None:
    """The rendered-entry cache must not change the prompt: same request, same objects."""
    assembler = PromptAssembler(model="m", system_prompt="S")
    history = [
        HistoryEntry(role="user", text="hi </user_message>", author_name="Ada"),
        HistoryEntry(role="user", text="again", author_name="Bob"),
        HistoryEntry(role="assistant", text="hello"),
    ]
    first = assembler.history_messages(history)
    second = assembler.history_messages(history)
    assert first == second
    assert first[1] is second[1]  # the assistant line: one cached message object
    assert [p.text for p in first[0].parts] == [  # type: ignore[union-attr]
        '<user_message from="Ada">\nhi &lt;/user_message>\n</user_message>',
        '<user_message from="Bob">\nagain\n</user_message>',
    ]
    renamed = [history[0].model_copy(update={"author_name": "Eve"}), *history[1:]]
    assert "Eve" in assembler.history_messages(renamed)[0].parts[0].text  # type: ignore[union-attr]


def test_a_messages_text_is_its_text_parts_joined_whatever_their_number() -> None:
    call = ToolCallPart(id="c1", name="dice")
    for parts, text in (
        ((), ""),
        ((TextPart(text="one"),), "one"),
        ((call,), ""),
        ((TextPart(text="a"), call, TextPart(text="b")), "ab"),
    ):
        assert Message(role="assistant", parts=parts).text == text
        assert LLMResponse(parts=parts, stop_reason="end_turn").text == text


def test_history_entries_render_once_and_the_kept_renderings_stay_bounded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(prompting, "RENDERED_CACHE", 3)
    assembler = PromptAssembler(model="m", system_prompt="S")
    entries = [
        HistoryEntry(role="user" if i % 2 == 0 else "assistant", text=f"t{i}", author_name="Ada")
        for i in range(4)
    ]
    first = assembler.history_messages(entries[:2])
    again = assembler.history_messages(entries[:2])
    assert [m.text for m in again] == [prompting.render_user_text("Ada", "t0"), "t1"]
    assert all(a is b for a, b in zip(first, again, strict=True))  # rendered once
    assert [m.text for m in assembler.history_messages(entries)][2:] == [
        prompting.render_user_text("Ada", "t2"),
        "t3",
    ]
    assert len(assembler._rendered) == 3  # the least recently used one went
    assert assembler.history_messages(entries[1:2]) == []  # a leading assistant line is dropped
