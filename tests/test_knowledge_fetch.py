"""The knowledge base's URLs have their own allow list, and what held still holds.

- CHORUS_KNOWLEDGE_FETCH_ALLOW lets the knowledge base read an internal wiki while the chat's
  ``fetch_page`` still refuses it (a real ``chorus chat``); CHORUS_FETCH_ALLOW alone no longer
  reaches the knowledge base, and a deployment relying on it is warned at start.
- Through the guard the wiring builds: private addresses are refused, the connection goes only
  to the address that was vetted (DNS pinning), and every redirect is vetted again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web
from redis.asyncio import Redis

from bot.knowledge.wiring import RecallParts
from bot.memory.knowledge import base_id, load_index
from bot.settings import ConfigError, settings_from
from bot.state.knowledge import KnowledgeStore
from bot.tools.builtin.fetch import Fetcher
from tests.loopback.base import LoopbackServer
from tests.loopback.openai_server import OpenAIServer
from tests.test_chat_e2e import base_env, run_chorus
from tests.test_knowledge import kb_redis  # noqa: F401 (a fixture)
from tests.test_plugins_e2e import playing_model
from tests.test_scopes import settings_with
from tests.test_tool_fetch import Site

WIKI = "# Deploys\n\nDeploys happen on Tuesdays after the stand-up.\n"


class Wiki(LoopbackServer):
    """An internal wiki on loopback: one Markdown page."""

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/deploys", self.page)]

    async def page(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.Response(text=WIKI, content_type="text/markdown")


def port_of(server: LoopbackServer) -> int:
    return int(server.url.rsplit(":", 1)[1])


@pytest.fixture
async def wiki() -> AsyncIterator[Wiki]:
    async with Wiki() as server:
        assert isinstance(server, Wiki)
        yield server


@pytest.mark.e2e
async def test_the_knowledge_base_reads_the_wiki_the_chat_cannot_fetch(
    tmp_path: Path, wiki: Wiki
) -> None:
    page = f"{wiki.url}/deploys"
    async with OpenAIServer() as server:
        server.default_reply = playing_model
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "openai:gpt-test",
            "OPENAI_API_KEY": "k-test",
            "OPENAI_BASE_URL": server.base_url,
            "CHORUS_KNOWLEDGE_PATHS": page,
            "CHORUS_KNOWLEDGE_FETCH_ALLOW": f"127.0.0.1:{port_of(wiki)}",
            "CHORUS_INSIGHTS_ENABLED": "false",
        }
        asks = [
            ("fetch_page", {"url": page}),
            ("search_knowledge", {"query": "when are deploys"}),
        ]
        lines = "".join(f"please call tool {name} with {json.dumps(a)}\n" for name, a in asks)
        code, out, err = await run_chorus(["chat"], env, tmp_path, lines.encode())
    assert code == 0, err[-3000:]
    fetched, searched = out.splitlines()
    assert fetched.startswith("Tool failed: "), fetched
    assert "refused: 127.0.0.1 is a loopback address" in fetched
    assert fetched.endswith("(set CHORUS_FETCH_ALLOW to permit it)")
    assert searched.startswith(f"Tool said: [1] source: {page} # Deploys"), searched
    assert "Deploys happen on Tuesdays" in searched
    assert len(wiki.requests) == 1  # the indexer's fetch; fetch_page sent nothing
    assert "no longer applies to the knowledge base" not in err


@pytest.mark.redis
async def test_the_chat_tools_allow_list_alone_no_longer_reaches_the_knowledge_base(
    kb_redis: Redis,  # noqa: F811 (the fixture imported above)
    wiki: Wiki,
    caplog: pytest.LogCaptureFixture,
) -> None:
    page = f"{wiki.url}/deploys"
    allow = f"127.0.0.1:{port_of(wiki)}"
    settings = settings_with("", CHORUS_KNOWLEDGE_PATHS=page, CHORUS_FETCH_ALLOW=allow)
    caplog.set_level(logging.WARNING, logger="chorus.knowledge")
    parts = RecallParts.build(settings, kb_redis)
    try:
        assert parts.indexer is not None
        [report] = await parts.indexer.index_all(force=True)
    finally:
        await parts.aclose()
    assert report.chunks == 0 and wiki.requests == []
    warned = [r.getMessage() for r in caplog.records if "no longer applies" in r.getMessage()]
    assert len(warned) == 1 and "move those entries to CHORUS_KNOWLEDGE_FETCH_ALLOW" in warned[0]
    skipped = [r for r in caplog.records if r.getMessage() == "knowledge source skipped"]
    assert "set CHORUS_KNOWLEDGE_FETCH_ALLOW to permit it" in skipped[0].error  # type: ignore[attr-defined]


@pytest.mark.redis
async def test_knowledge_urls_are_pinned_and_every_redirect_is_vetted(
    kb_redis: Redis,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The wiring's own guard: the allowed site is read through a name whose later DNS answers
    point elsewhere (the connection uses the vetted address), a redirect from it to a site the
    list does not allow is refused, and so is that site asked directly."""
    async with Site() as site, Site() as other:
        assert isinstance(site, Site) and isinstance(other, Site)
        port, elsewhere = port_of(site), f"http://127.0.0.1:{port_of(other)}/plain"
        rebound = f"http://rebind.test:{port}/plain"
        sources = [rebound, f"http://127.0.0.1:{port}/redirect?to={elsewhere}", elsewhere]
        settings = settings_with(
            "",
            CHORUS_KNOWLEDGE_PATHS=",".join(sources),
            CHORUS_KNOWLEDGE_FETCH_ALLOW=f"127.0.0.1:{port}",
        )
        parts = RecallParts.build(settings, kb_redis)
        answers = iter([["127.0.0.1"], ["10.9.9.9"], ["10.9.9.9"]])
        lookups: list[str] = []

        async def rebinding_dns(host: str, port: int) -> list[str]:
            lookups.append(host)
            return next(answers)

        try:
            assert parts.indexer is not None and isinstance(parts.indexer.fetcher, Fetcher)
            parts.indexer.fetcher.guard.resolve = rebinding_dns
            [report] = await parts.indexer.index_all(force=True)
        finally:
            await parts.aclose()
        index = await load_index(KnowledgeStore(kb_redis), base_id(tuple(sources)))
    assert report.changed and index is not None
    assert {chunk.source for chunk in index.chunks} == {rebound}
    assert lookups == ["rebind.test"]
    assert [r.path for r in site.requests] == ["/plain", "/redirect"]
    assert other.requests == []  # neither the redirect nor the direct request reached it


def test_a_bad_entry_names_the_knowledge_allow_list() -> None:
    with pytest.raises(ConfigError, match="CHORUS_KNOWLEDGE_FETCH_ALLOW=.*: 'a b' is not a host"):
        settings_from({"CHORUS_KNOWLEDGE_FETCH_ALLOW": "wiki.corp:8443, a b"})
