"""A simulation of Anthropic's prompt cache, for the loopback server and the benchmark.

It follows the documented rules (https://docs.anthropic.com/en/docs/build-with-claude/
prompt-caching): the prompt is the sequence tools -> system -> messages; a block carrying
``cache_control`` is a breakpoint; a request reads the longest cached prefix that ends at a
breakpoint or at one of the 20 block boundaries before it; it writes the prefix up to its last
breakpoint when that prefix is new; prefixes shorter than the model's minimum are never cached;
an entry lives 5 minutes, refreshed by every read. Prefixes are identified by a hash chained over
the canonical JSON of each block (``cache_control`` itself excluded, since moving a breakpoint
does not change the content). Tokens are approximated as JSON characters / 4.

The simulator can only reward a prompt layout whose prefix really is byte-stable, which is why
the benchmark and the cache tests use it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LOOKBACK = 20


def _strip(block: Any) -> Any:
    if isinstance(block, dict):
        return {k: v for k, v in block.items() if k != "cache_control"}
    return block


def _canonical(kind: str, block: Any, role: str | None = None) -> bytes:
    wrapped = {"kind": kind, "role": role, "block": _strip(block)}
    return json.dumps(wrapped, sort_keys=True, separators=(",", ":")).encode()


def prompt_blocks(body: dict[str, Any]) -> list[tuple[bytes, bool]]:
    """(canonical block, is breakpoint) in prompt order: tools, system, then message content."""
    blocks: list[tuple[bytes, bool]] = []
    for tool in body.get("tools") or []:
        blocks.append((_canonical("tool", tool), "cache_control" in tool))
    system = body.get("system") or []
    if isinstance(system, str):
        system = [{"type": "text", "text": system}]
    for block in system:
        blocks.append((_canonical("system", block), "cache_control" in block))
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        for block in content or []:
            blocks.append((_canonical("message", block, message["role"]), "cache_control" in block))
    return blocks


@dataclass
class PromptCacheSim:
    min_tokens: int = 1024
    ttl: float = 300.0
    clock: Callable[[], float] = time.monotonic
    entries: dict[str, float] = field(default_factory=dict)  # prefix hash -> expiry

    def account(self, body: dict[str, Any]) -> dict[str, int]:
        """Usage of one request (uncached input, cache write, cache read), updating the cache."""
        now = self.clock()
        self.entries = {h: exp for h, exp in self.entries.items() if exp > now}
        blocks = prompt_blocks(body)
        hashes: list[str] = []
        tokens: list[int] = []
        digest = hashlib.sha256()
        total = 0
        for raw, _ in blocks:
            digest.update(raw)
            hashes.append(digest.copy().hexdigest())
            total += max(1, len(raw) // 4)
            tokens.append(total)
        breakpoints = [i for i, (_, bp) in enumerate(blocks) if bp]
        read = 0
        for bp in breakpoints:
            for j in range(bp, max(-1, bp - LOOKBACK - 1), -1):
                if hashes[j] in self.entries:
                    read = max(read, tokens[j])
                    self.entries[hashes[j]] = now + self.ttl
                    break
        write = 0
        if breakpoints:
            last = breakpoints[-1]
            for bp in breakpoints:
                if tokens[bp] >= self.min_tokens and hashes[bp] not in self.entries:
                    self.entries[hashes[bp]] = now + self.ttl
            if tokens[last] >= self.min_tokens and tokens[last] > read:
                write = tokens[last] - read
        return {
            "input_tokens": total - read - write,
            "cache_write_tokens": write,
            "cache_read_tokens": read,
        }
