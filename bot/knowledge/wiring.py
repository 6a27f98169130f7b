"""Semantic recall and the knowledge base, built from settings for the composition root.

Why here and not in ``bot/app.py``: the app stays a list of parts (it is near its size limit);
this module knows how the embedder, the reply-path ``Recall``, the indexer and the
``search_knowledge`` tool fit together and which of them a deployment needs:

- the embedder only with CHORUS_EMBEDDING_MODEL (else relevance stays lexical);
- the tool and the indexer only when some knowledge base is configured (CHORUS_KNOWLEDGE_PATHS
  or a scope's ``knowledge``), the tool answering from the asking message's scope's base;
- the indexer's URLs through their own SSRF guard, whose exceptions are
  CHORUS_KNOWLEDGE_FETCH_ALLOW alone: CHORUS_FETCH_ALLOW is what any chat user can have
  ``fetch_page`` reach. A deployment with knowledge URLs that sets only CHORUS_FETCH_ALLOW
  (expecting the knowledge base to share it) is warned at start, neither widened nor narrowed
  silently.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from bot.events import ChatMessage
from bot.knowledge.indexer import KnowledgeIndexer
from bot.knowledge.tool import knowledge_tool
from bot.llm.embeddings import embedder_for
from bot.memory.recall import Recall
from bot.memory.vectors import Embedder
from bot.ops.metrics import MetricsSink
from bot.ops.model_calls import Spend, metered_embedder
from bot.settings import Settings
from bot.settings.allowlist import KNOWLEDGE_ALLOW_VARIABLE, Allowlist
from bot.state.connect import Client
from bot.tools.base import Tool
from bot.tools.builtin.fetch import Fetcher
from bot.tools.netguard import NetGuard

if TYPE_CHECKING:
    from collections.abc import Sequence

log = logging.getLogger("chorus.knowledge")


def knowledge_lists(settings: Settings) -> list[tuple[str, ...]]:
    """Every knowledge base the configuration names: the deployment's and each scope's."""
    found = [settings.memory.knowledge_sources]
    found += [tuple(scope.knowledge) for scope in settings.file.scopes if scope.knowledge]
    return [sources for sources in found if sources]


def warn_shared_allow(settings: Settings) -> None:
    """One warning when knowledge URLs may have relied on CHORUS_FETCH_ALLOW, which no longer
    applies to them (and which lets every chat user's ``fetch_page`` reach those hosts)."""
    urls = any(
        source.startswith(("http://", "https://"))
        for sources in knowledge_lists(settings)
        for source in sources
    )
    if urls and settings.tools.fetch_allow and not settings.memory.knowledge_fetch_allow:
        log.warning(
            "CHORUS_FETCH_ALLOW no longer applies to the knowledge base: its URLs are fetched "
            "with CHORUS_KNOWLEDGE_FETCH_ALLOW only (empty: public addresses only). If you set "
            "CHORUS_FETCH_ALLOW for the knowledge base, move those entries to "
            "CHORUS_KNOWLEDGE_FETCH_ALLOW; while they stay in CHORUS_FETCH_ALLOW, any chat user "
            "can have fetch_page read those hosts",
            extra={"fetch_allow": ",".join(sorted(settings.tools.fetch_allow))},
        )


class RecallParts:
    """The parts, built once per process; ``bind`` them to the scopes, ``start``, ``aclose``."""

    def __init__(
        self, recall: Recall, indexer: KnowledgeIndexer | None, settings: Settings
    ) -> None:
        self.recall = recall
        self.indexer = indexer
        self.settings = settings  # the configuration in force: reload replaces it
        self.tools: list[Tool] = [knowledge_tool(recall)] if indexer is not None else []
        if indexer is not None:
            indexer.bases = lambda: knowledge_lists(self.settings)

    @classmethod
    def build(
        cls,
        settings: Settings,
        redis: Client,
        metrics: MetricsSink | None = None,
        *,
        embedder: Embedder | None = None,
    ) -> RecallParts:
        """``embedder``: a given one (tests, benchmarks, the app's own); else
        CHORUS_EMBEDDING_MODEL's, under the daily cost cap like every model call (indexing a
        knowledge base from ``chorus knowledge index`` included)."""
        memory = settings.memory
        if embedder is None:
            spend = Spend.for_settings(settings, redis)
            embedder = metered_embedder(spend, embedder_for(memory, settings.llm))
        recall = Recall(redis, memory, embedder, metrics=metrics)
        indexer = None
        if knowledge_lists(settings):
            tools = settings.tools
            allow = Allowlist.parse(memory.knowledge_fetch_allow, KNOWLEDGE_ALLOW_VARIABLE)
            fetcher = Fetcher(
                NetGuard(allow=allow, variable=KNOWLEDGE_ALLOW_VARIABLE),
                max_bytes=tools.fetch_max_bytes,
                timeout=tools.fetch_timeout,
            )
            indexer = KnowledgeIndexer(redis, memory, embedder, fetcher, bases=list)
            warn_shared_allow(settings)
        return cls(recall, indexer, settings)

    @property
    def active(self) -> bool:
        """Whether turns need recall at all (a model or a knowledge base); else the reply path
        stays exactly the lexical one."""
        return self.recall.embedder is not None or self.indexer is not None

    def bind(self, knowledge_of: Callable[[ChatMessage], Sequence[str]]) -> None:
        """Where each message's knowledge base comes from (its scope's profile)."""
        self.recall.knowledge_of = knowledge_of

    async def start(self) -> None:
        """The indexer's schedule, after its first pass (bounded: ``indexer.START_WAIT``)."""
        if self.indexer is not None:
            await self.indexer.start()

    def reload(self, settings: Settings) -> None:
        """``chorus reload``: index the (maybe changed) knowledge lists now."""
        self.settings = settings
        if self.indexer is not None:
            self.indexer.reindex()
        elif knowledge_lists(settings):
            log.warning("a knowledge base was added; it is indexed after a restart")

    async def aclose(self) -> None:
        if self.indexer is not None:
            await self.indexer.aclose()
        await self.recall.aclose()
