"""Semantic recall and the knowledge base end to end: a real ``chorus run`` process (the console,
stdin piped), the real ``openai`` SDK against the loopback OpenAI server for both the chat model
and the embeddings, real Redis.

- A pin "eats no meat" reaches the prompt of "any vegetarian dinner ideas?" (no shared word)
  once its vector was stored off the reply path; with lexical relevance only, it does not.
- A question about the server's rules gets the knowledge-base excerpt with its source in the
  prompt, and the ``search_knowledge`` tool returns the chunk with its source.
"""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from bot.memory.knowledge import base_id
from bot.state import keys
from tests.agent_rig import VENDORS, tool_results
from tests.loopback.openai_server import OpenAIServer
from tests.test_chat_e2e import VENDORS as CHAT_VENDORS
from tests.test_chat_e2e import base_env, run_chorus, spawn_chorus
from tests.test_console_tools_e2e import tool_playing_model

RULES = """# Server rules

Be kind to each other.

## Voice chat

Push-to-talk is required in the voice channels after 10 pm.
"""
ASK_VEG = "any vegetarian dinner ideas?"
ASK_RULES = "what are the voice chat rules?"


def model(body: dict[str, Any]) -> Any:
    """Calls ``search_knowledge`` for a question about rules, then reports what it returned."""
    results = tool_results("openai", body)
    if results:
        return "From the rules: " + results[-1][1].replace("\n", " | ")
    if ASK_RULES in json.dumps(body["messages"][-1]):
        call = {"id": "call_1", "name": "search_knowledge", "arguments": {"query": "voice chat"}}
        return {"tool_calls": [call]}
    return "ok"


def chat_prompts(server: OpenAIServer, needle: str) -> list[str]:
    """The newest user message of each chat request whose newest message mentions ``needle``."""
    found = []
    for rec in server.requests:
        if rec.path != "/v1/chat/completions":
            continue
        last = json.dumps(rec.body["messages"][-1])
        if needle in last:
            found.append(last)
    return found


def env_for(tmp_path: Path, server: OpenAIServer, redis_url: str, user: str) -> dict[str, str]:
    return base_env(tmp_path) | {
        "CHORUS_MODEL": "openai:gpt-test",
        "OPENAI_API_KEY": "k",
        "OPENAI_BASE_URL": server.base_url,
        "CHORUS_REDIS_URL": redis_url,
        "CHORUS_INSIGHTS_ENABLED": "false",
        "CHORUS_EMBEDDING_DEADLINE": "10",  # generous on a loaded machine; loopback is fast
        "USER": user,
    }


async def poll(condition: Any, limit: float = 60.0) -> None:
    async with asyncio.timeout(limit):
        while not await condition():  # noqa: ASYNC110 (another process's Redis writes)
            await asyncio.sleep(0.05)


async def test_a_paraphrase_finds_the_pin_and_knowledge_carries_its_source(
    tmp_path: Path, production_store: tuple[str, Redis], key_tag: str
) -> None:
    # one Redis server, then a Redis Cluster of three primaries (a knowledge base's parts share
    # a slot there: its rebuild is one transaction; the user's vectors are in the user's slot)
    real_redis_url, real_redis = production_store
    rules = tmp_path / "rules.md"
    rules.write_text(RULES)
    user = f"ada{key_tag}"
    base = base_id((str(rules),))
    async with OpenAIServer() as server:
        server.default_reply = model
        env = env_for(tmp_path, server, real_redis_url, user) | {
            "CHORUS_EMBEDDING_MODEL": "openai:text-embedding-3-small",
            "CHORUS_KNOWLEDGE_PATHS": str(rules),
        }
        proc = await spawn_chorus(["run"], env, tmp_path, stdin=asyncio.subprocess.PIPE)
        assert proc.stdin is not None and proc.stdout is not None
        answers: list[str] = []

        async def say(line: str) -> str:
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write(line.encode() + b"\n")
            await proc.stdin.drain()
            answer = await asyncio.wait_for(proc.stdout.readline(), 90)
            answers.append(answer.decode().strip())
            return answers[-1]

        try:
            await say("/remember eats no meat")
            await say("hello there")  # this turn's read finds the pin without a vector
            vectors = keys.user_vectors("console", user)
            await poll(lambda: _hlen(real_redis, vectors, 1))  # stored off the reply path
            await say(ASK_VEG)
            await poll(lambda: _exists(real_redis, keys.knowledge(base, "version")))
            told = await say(ASK_RULES)
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err_bytes = await asyncio.wait_for(proc.communicate(), 60)
            await real_redis.delete(*(keys.knowledge(base, p) for p in _KB_PARTS))
    err = err_bytes.decode()
    assert proc.returncode == 0, err[-3000:]
    [veg] = chat_prompts(server, ASK_VEG)
    assert "eats no meat" in veg, veg
    embedded = server.embedded
    assert embedded.index(["eats no meat"]) < embedded.index([ASK_VEG])  # the note, the query
    first, *_ = chat_prompts(server, ASK_RULES)
    assert '<excerpt source=\\"rules.md # Server rules &gt; Voice chat\\">' in first, first
    assert "Push-to-talk is required" in first
    assert told.startswith("From the rules: [1] source: rules.md # Server rules > Voice chat | ")
    assert "Push-to-talk is required" in told


async def test_with_lexical_relevance_only_the_paraphrase_misses_the_pin(
    tmp_path: Path, real_redis_url: str, key_tag: str
) -> None:
    async with OpenAIServer() as server:
        env = env_for(tmp_path, server, f"memory://e2e-{key_tag}", f"bo{key_tag}")
        stdin = f"/remember eats no meat\nhello there\n{ASK_VEG}\nwhat meat do I eat?\n"
        code, out, err = await run_chorus(["run"], env, tmp_path, stdin.encode())
    assert code == 0, err[-3000:]
    assert len(out.splitlines()) == 4
    [veg] = chat_prompts(server, ASK_VEG)
    assert "eats no meat" not in veg
    [lexical] = chat_prompts(server, "what meat do I eat?")
    assert "eats no meat" in lexical  # the lexical score still works on shared words
    assert server.embedded == []  # no embedding model configured: no embedding call


_KB_PARTS = ("version", "chunks", "vec", "sources", "lock")


async def _hlen(redis: Redis, key: str, n: int) -> bool:
    return int(await redis.hlen(key)) >= n


async def _exists(redis: Redis, key: str) -> bool:
    return bool(await redis.exists(key))


@pytest.mark.parametrize("vendor", VENDORS)
async def test_each_vendor_sdk_takes_the_search_knowledge_schema(
    vendor: str, tmp_path: Path
) -> None:
    """The tool's schema goes through each vendor's SDK and validating loopback server, and the
    model's call returns the passage with its source."""
    rules = tmp_path / "rules.md"
    rules.write_text(RULES)
    server_cls, chat_model, key_env, url_env = CHAT_VENDORS[vendor]
    async with server_cls() as server:
        server.default_reply = tool_playing_model(vendor)
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": chat_model,
            key_env: "k-test",
            url_env: server.base_url,
            "CHORUS_KNOWLEDGE_PATHS": str(rules),
            "CHORUS_INSIGHTS_ENABLED": "false",
        }
        line = b'please call tool search_knowledge with {"query": "push-to-talk", "limit": 2}\n'
        code, out, err = await run_chorus(["chat"], env, tmp_path, line)
    assert code == 0, err[-3000:]
    assert out.startswith("Tool said: [1] source: rules.md # Server rules > Voice chat"), out
    assert "Push-to-talk is required" in out
