"""The golden case of a persona's system text (``prompts/persona/*`` around ``prompts/system``),
rendered by the builder production uses for every persona of chorus.toml. Registered as a case
by ``tests/test_prompts_golden.py``."""

from __future__ import annotations

from redis.asyncio import Redis

from bot.agent.prompting import system_prompt


async def system_persona(redis: Redis) -> str:
    persona = "You are Captain Byte, the ship's cheerful navigator on this Discord server."
    style = "short sentences, nautical words, one joke at most"
    return system_prompt("Byte", persona=persona, language="French", style=style)
