"""Turn a conversation into an ``LLMRequest`` whose prefix the provider's cache can reuse.

Order matters for caching: the static system text first (then a cache point), then the history
(every earlier turn is rendered from stored entries the same way each time, so it is
byte-identical from one request to the next), and only then the new message. Anything that
changes per request (the new message, later the user's pins and the local time) comes last.

Text that users wrote is wrapped in ``<user_message>`` data blocks; the system prompt tells the
model those blocks are data, not instructions, and ``_quote`` keeps a user from closing the block.

Why the rendered entries are a hand-rolled LRU (an ``OrderedDict``) and not a
``cachetools.LRUCache``: the map is read once per history entry on every turn, and an
``LRUCache`` lookup is a chain of Python calls where ``OrderedDict.get`` and ``move_to_end`` are
C. Measured with ``python -m bench.instructions --check`` (the in-process figure per answered
message), ``LRUCache`` here and in ``bot/state/history.py`` made every answered message dearer.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field

import prompts
from bot.agent.reasoning import Level
from bot.events import Attachment, AttachmentKind, ChatMessage
from bot.llm.types import (
    CachePoint,
    ImagePart,
    LLMRequest,
    Message,
    Part,
    SystemPart,
    TextPart,
    ToolSpec,
)
from bot.state.history import HistoryEntry

_TAG = "user_message"
RENDERED_CACHE = 4096  # history entries whose rendered part is kept between turns


def system_prompt(
    bot_name: str,
    *,
    persona: str | None = None,
    language: str | None = None,
    style: str | None = None,
) -> str:
    """The system text of one persona (``prompts/system`` around its identity): only values
    fixed by the configuration go in, so it is byte-identical on every request of a scope and
    heads the cached prefix. ``persona`` replaces the default identity paragraph (who the bot
    is); the house rules that follow it (format, tools, memory, safety) stay."""
    parts = [persona.strip() if persona else prompts.render("persona/identity", bot_name=bot_name)]
    if language:
        parts.append(prompts.render("persona/language", language=language.strip()))
    if style:
        parts.append(prompts.render("persona/style", style=style.strip()))
    return prompts.render("system", identity="\n\n".join(parts))


def _quote(text: str) -> str:
    # A user must not be able to end the data block and speak as the system.
    return text.replace(f"</{_TAG}", f"&lt;/{_TAG}").replace(f"<{_TAG}", f"&lt;{_TAG}")


def _attr(value: str) -> str:
    return (
        value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace("\n", " ")
    )


def _size(size: int | None) -> str:
    if size is None:
        return ""
    return f"{size / 1024:.0f} KB" if size < 1024 * 1024 else f"{size / 1024 / 1024:.1f} MB"


def render_user_text(author_name: str, text: str) -> str:
    """How one user's message appears to the model: a data block naming its author."""
    return f'<{_TAG} from="{_attr(author_name)}">\n{_quote(text)}\n</{_TAG}>'


@dataclass(frozen=True)
class PromptAssembler:
    """Builds requests for one deployment: model, static system text and output limit."""

    model: str
    system_prompt: str
    max_tokens: int = 1024
    vision: bool = True
    # Each turn renders the same history again; the parts of recent entries are kept (the
    # rendering is a pure function of role, author and text, so this cannot change a byte).
    _rendered: OrderedDict[tuple[str, str, str], Message] = field(
        default_factory=OrderedDict, init=False, repr=False, compare=False
    )

    @property
    def system(self) -> tuple[SystemPart, ...]:
        return (TextPart(text=self.system_prompt), CachePoint())

    def history_messages(self, history: Sequence[HistoryEntry]) -> list[Message]:
        """Stored entries as alternating messages (consecutive same-role entries are merged)."""
        messages: list[Message] = []
        rendered = self._rendered
        for entry in history:  # the cache looked up here: a turn renders ~40 entries
            key = (entry.role, entry.author_name, entry.text)
            single = rendered.get(key)
            if single is None:
                single = self._render(entry, key)
            else:
                rendered.move_to_end(key)
            if messages and messages[-1].role == entry.role:
                last = messages.pop()
                messages.append(Message(role=last.role, parts=(*last.parts, *single.parts)))
            else:
                messages.append(single)
        # A conversation must start with the user; drop a leading assistant line left by a cap.
        while messages and messages[0].role != "user":
            messages.pop(0)
        return messages

    def _render(self, entry: HistoryEntry, key: tuple[str, str, str]) -> Message:
        """One entry as a message of its own, kept under ``key`` (frozen, so one object serves
        every turn)."""
        text = (
            render_user_text(entry.author_name or "user", entry.text)
            if entry.role == "user"
            else entry.text
        )
        message = self._rendered[key] = Message(role=entry.role, parts=(TextPart(text=text),))
        if len(self._rendered) > RENDERED_CACHE:
            self._rendered.popitem(last=False)
        return message

    def _attachments(self, attachments: Sequence[Attachment]) -> tuple[Part, ...]:
        """Images go to the model as images (when ``vision`` is on); other files are named."""
        parts: list[Part] = []
        for item in attachments:
            if self.vision and item.kind is AttachmentKind.IMAGE and (item.data or item.url):
                parts.append(
                    ImagePart(
                        mime=item.mime or "image/png",
                        data=item.data,
                        url=None if item.data else item.url,
                    )
                )
            else:
                details = ", ".join(x for x in (item.mime, _size(item.size)) if x)
                name = _attr(item.filename or item.kind.value)
                parts.append(
                    TextPart(text=f"[attachment: {name}{f' ({details})' if details else ''}]")
                )
        return tuple(parts)

    def build(
        self,
        message: ChatMessage,
        history: Sequence[HistoryEntry],
        *,
        tools: Sequence[ToolSpec] = (),
        context: str = "",
        reasoning: Level = "off",
    ) -> LLMRequest:
        """The request for ``message``: [tools][system] | [history] | [new message][context].

        ``|`` marks a cache point. ``context`` is the volatile tail (the user's pins, the
        platform, local time); it always comes after the last cross-turn cache point.
        """
        messages = self.history_messages(history)
        author = message.author.display_name or message.author.id
        new: tuple[Part, ...] = (TextPart(text=render_user_text(author, message.text)),)
        new += self._attachments(message.attachments)
        if context:
            new += (TextPart(text=context),)
        if messages:
            # Cache the conversation so far: the next request reads it from the cache. When
            # history ends with unanswered user lines the new message joins that user turn.
            last = messages.pop()
            if last.role == "user":
                messages.append(Message(role="user", parts=(*last.parts, CachePoint(), *new)))
            else:
                messages.append(Message(role=last.role, parts=(*last.parts, CachePoint())))
                messages.append(Message(role="user", parts=new))
        else:
            messages.append(Message(role="user", parts=new))
        return LLMRequest(
            model=self.model,
            system=self.system,
            messages=tuple(messages),
            tools=tuple(tools),
            cache_tools=bool(tools),
            max_tokens=self.max_tokens,
            cache_key=str(message.conversation),
            reasoning=reasoning,
        )
