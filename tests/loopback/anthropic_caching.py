"""An Anthropic loopback server whose usage numbers come from the prompt-cache simulation."""

from __future__ import annotations

from typing import Any

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.cache_sim import PromptCacheSim


class CachingAnthropicServer(AnthropicServer):
    """Reports ``cache_creation_input_tokens`` / ``cache_read_input_tokens`` like the real API
    would for the prompts it receives (see ``PromptCacheSim``)."""

    def __init__(self, sim: PromptCacheSim | None = None) -> None:
        super().__init__()
        self.sim = sim or PromptCacheSim()
        self.usages: list[dict[str, int]] = []

    def next_reply(self, body: Any) -> Any:
        reply = super().next_reply(body)
        spec: dict[str, Any] = {"text": reply} if isinstance(reply, str) else dict(reply)
        usage = self.sim.account(body if isinstance(body, dict) else {})
        self.usages.append(usage)
        spec["usage"] = {**(spec.get("usage") or {}), **usage}
        return spec
