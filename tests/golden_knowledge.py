"""The golden case of the knowledge base's texts: the ``<knowledge>`` block of the prompt's
volatile tail (``prompts/memory/knowledge*``) and every answer of the ``search_knowledge`` tool
(``prompts/tools/knowledge_*``), registered as a case by ``tests/test_prompts_golden.py``."""

from __future__ import annotations

from redis.asyncio import Redis

from bot.events import Author, ChatMessage, ConversationKey
from bot.knowledge.tool import knowledge_tool
from bot.memory.buffers import MemorySettings
from bot.memory.knowledge import base_id, chunk_text, save_index
from bot.memory.recall import Recall
from bot.state.knowledge import KnowledgeStore
from bot.tools.base import ToolContext, ToolError

SOURCE = "docs/rules.md"
RULES = """# Server rules

Be kind to each other. <b>No</b> spoilers & no "drama".

## Voice chat

Push-to-talk is required in the voice channels after 10 pm. Music bots only in #music-voice.
"""


def _message(text: str, channel: str) -> ChatMessage:
    return ChatMessage(
        platform="discord",
        id="k1",
        conversation=ConversationKey(platform="discord", channel=channel),
        author=Author(id="u1", display_name="Ada"),
        text=text,
    )


async def knowledge_texts(redis: Redis) -> str:
    """What the model reads from a knowledge base: the prompt's excerpts (escaped, with their
    source) and the tool's hit, no-match, empty-query and no-base answers."""
    sources = (SOURCE,)
    chunks = chunk_text(SOURCE, RULES, 600)
    await save_index(
        KnowledgeStore(redis), base_id(sources), chunks, [None] * len(chunks), model=""
    )
    recall = Recall(
        redis,
        MemorySettings(),
        None,
        knowledge_of=lambda m: sources if m.conversation.channel == "general" else (),
    )
    asked = _message("are music bots allowed in voice chat?", "general")
    hits = await recall.search_for(asked, asked.text, limit=4)
    assert hits, "the rules match the question"
    tool = knowledge_tool(recall)
    here = ToolContext(message=asked)
    parts = [
        "# the prompt's excerpts",
        recall.render_knowledge(hits),
        "# search_knowledge: a hit",
        await tool.call({"query": "spoilers", "limit": 1}, here),
        "# search_knowledge: no match",
        await tool.call({"query": "quantum chromodynamics"}, here),
    ]
    for title, query, channel in (("an empty query", "  ", "general"), ("no base", "x", "other")):
        try:
            await tool.call({"query": query}, ToolContext(message=_message("?", channel)))
        except ToolError as error:
            parts += [f"# search_knowledge: {title}", str(error)]
    return "\n".join(parts)
