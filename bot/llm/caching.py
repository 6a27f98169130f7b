"""What each vendor's prompt cache needs, for the per-turn cache report and its warning.

Anthropic caches only prompts at least as long as a per-model minimum (1,024 tokens for Sonnet
and Opus, 2,048 for Haiku; https://docs.anthropic.com/en/docs/build-with-claude/prompt-caching)
and reports both cache writes and reads. OpenAI caches prefixes of 1,024 tokens and more and
Gemini's implicit cache starts at 1,024 (Flash) / 4,096 (Pro) tokens; both report only reads.
"""

from __future__ import annotations

from bot.llm.types import Usage


def min_cacheable_tokens(provider: str, model: str) -> int:
    name = model.lower()
    if provider == "anthropic":
        return 2048 if "haiku" in name else 1024
    if provider == "gemini":
        return 4096 if "pro" in name else 1024
    return 1024


def reports_cache_writes(provider: str) -> bool:
    return provider == "anthropic"


def cache_missed(provider: str, model: str, usage: Usage, *, iteration: int) -> bool:
    """True when a request long enough to cache shows no sign the cache was used.

    Anthropic must report a read or a write on every such request. OpenAI and Gemini report
    reads only, and the first request of a prefix is a silent write, so for them only a later
    iteration of one tool loop (whose prefix the previous iteration sent) is expected to read.
    """
    if usage.total_input_tokens < min_cacheable_tokens(provider, model):
        return False
    if reports_cache_writes(provider):
        return usage.cache_read_tokens == 0 and usage.cache_write_tokens == 0
    return iteration >= 2 and usage.cache_read_tokens == 0
