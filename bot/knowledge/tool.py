"""``search_knowledge``: the model looks further in the scope's knowledge base than the few
excerpts the prompt carries.

The answer lists each chunk with its source (file path or URL, and the heading above it) so the
model can cite it; like every tool result it reaches the model wrapped as untrusted data
(``bot.agent.loop.untrusted``). The base searched is the asking message's scope's, never one
the model names, so a user in one community cannot read another's documents.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

import prompts
from bot.memory.recall import Recall
from bot.tools.base import ToolContext, ToolError
from bot.tools.function import FunctionTool

TIMEOUT = 30.0


def knowledge_tool(recall: Recall, *, timeout: float = TIMEOUT) -> FunctionTool:
    """The ``search_knowledge`` tool over ``recall``'s knowledge bases."""

    async def search_knowledge(
        query: str, ctx: ToolContext, limit: Annotated[int, Field(ge=1, le=10)] = 4
    ) -> str:
        """Search this community's own documents (rules, FAQ, guides the operators provided)
        and return the passages that match best, each with its source. Use it for questions
        about this server, channel or project that the conversation does not answer.

        Args:
            query: what to look for, in plain words, e.g. "voice chat rules".
            limit: how many passages to return.
        """
        if not query.strip():
            raise ToolError(prompts.render("tools/knowledge_empty_query"))
        hits = await recall.search_for(ctx.message, query, limit=limit)
        if hits is None:
            raise ToolError(prompts.render("tools/knowledge_none"))
        if not hits:
            return prompts.render("tools/knowledge_no_match", query=query.strip())
        return "\n\n".join(
            prompts.render("tools/knowledge_hit", n=n, source=hit.chunk.where, text=hit.chunk.text)
            for n, hit in enumerate(hits, 1)
        )

    return FunctionTool(search_knowledge, timeout=timeout)
