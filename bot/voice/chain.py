"""The speech chain: providers tried in order, each bounded in time, audio cached by (voice, text).

Like the models' fallback chain (``bot.llm.fallback``), a provider that fails or takes longer
than ``timeout`` hands the text to the next link; espeak-ng, local and always installed, is the
last link, so an overlay speaks even when every vendor is down. Repeated lines (a command's
answer, a thanks) are spoken from the cache: an LRU bounded in bytes, keyed by the link that
would speak first and the text.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence

from cachetools import LRUCache

from bot.settings.llm import LLMSettings
from bot.settings.voice import VoiceSettings
from bot.voice.providers import EspeakVoice, SpeechError, Spoken, Voice

log = logging.getLogger("chorus.voice")

Link = tuple[str, str]  # (provider name, voice)


def parse_chain(links: Sequence[str]) -> list[Link]:
    """``provider:voice`` strings as links, espeak-ng appended when no link uses it."""
    found = [(link.partition(":")[0], link.partition(":")[2].strip()) for link in links]
    if not any(name == "espeak" for name, _ in found):
        found.append(("espeak", "en"))
    return found


class SpeechChain:
    """``speak(text, links)``: the first link that answers within ``timeout``."""

    def __init__(
        self,
        providers: Mapping[str, Voice],
        links: Sequence[Link],
        *,
        timeout: float = 15.0,
        cache_bytes: int = 32 * 1024 * 1024,
    ) -> None:
        self.providers = dict(providers)
        self.links = list(links)
        self.timeout = timeout
        self.cache: LRUCache[tuple[str, str, str], Spoken] = LRUCache(
            maxsize=cache_bytes, getsizeof=lambda spoken: len(spoken.audio) + 1
        )
        self.hits = 0

    async def speak(self, text: str, links: Sequence[Link] | None = None) -> Spoken:
        chain = list(links or self.links)
        errors: list[str] = []
        for name, voice in chain:
            key = (name, voice, text)
            cached = self.cache.get(key)
            if cached is not None:
                self.hits += 1
                return cached
            provider = self.providers.get(name)
            if provider is None:
                errors.append(f"{name}: not configured")
                continue
            try:
                async with asyncio.timeout(self.timeout):
                    spoken = await provider.speak(text, voice)
            except (SpeechError, TimeoutError) as exc:
                reason = str(exc) or f"no audio within {self.timeout}s"
                log.warning(
                    "speech provider failed; trying the next",
                    extra={"provider": name, "error": reason[:200]},
                )
                errors.append(f"{name}: {reason}")
                continue
            if len(spoken.audio) < self.cache.maxsize:
                self.cache[key] = spoken
            return spoken
        raise SpeechError("every speech provider failed: " + "; ".join(errors))

    async def aclose(self) -> None:
        for provider in self.providers.values():
            await provider.aclose()


def build_providers(voice: VoiceSettings, llm: LLMSettings) -> dict[str, Voice]:
    """The providers ``CHORUS_TTS`` (and the scopes' chains) name, built from the settings;
    one that lacks its SDK or key is left out (the chain skips it, with a warning)."""
    providers: dict[str, Voice] = {"espeak": EspeakVoice()}
    wanted = {link.partition(":")[0] for link in voice.tts}
    if "openai" in wanted:
        try:
            providers["openai"] = _openai(llm, voice)
        except (ImportError, ValueError) as exc:
            log.warning("openai speech is not available: %s", exc)
    if "gemini" in wanted:
        try:
            from bot.llm.gemini import sdk_client as gemini_client
            from bot.voice.providers import GeminiVoice

            key = llm.api_key("gemini")
            base = llm.base_url("gemini") or "https://generativelanguage.googleapis.com"
            if key is None:
                raise ValueError("GEMINI_API_KEY is not set")
            providers["gemini"] = GeminiVoice(
                gemini_client(key, base, voice.timeout), voice.gemini_model
            )
        except (ImportError, ValueError) as exc:
            log.warning("gemini speech is not available: %s", exc)
    if "elevenlabs" in wanted:
        try:
            from elevenlabs.client import AsyncElevenLabs

            from bot.voice.providers import ElevenLabsVoice

            secret = voice.elevenlabs_api_key
            if secret is None:
                raise ValueError("ELEVENLABS_API_KEY is not set")
            client = AsyncElevenLabs(
                api_key=secret.get_secret_value(),
                base_url=voice.elevenlabs_base_url or None,
                timeout=voice.timeout,
            )
            providers["elevenlabs"] = ElevenLabsVoice(client, voice.elevenlabs_model)
        except (ImportError, ValueError) as exc:
            log.warning("elevenlabs speech is not available: %s", exc)
    return providers


def _openai(llm: LLMSettings, voice: VoiceSettings) -> Voice:
    from bot.llm.openai import sdk_client
    from bot.voice.providers import OpenAIVoice

    base = llm.base_url("openai") or "https://api.openai.com/v1"
    key = llm.api_key("openai") or ("none" if llm.base_url("openai") else None)
    if key is None:
        raise ValueError("OPENAI_API_KEY is not set")
    return OpenAIVoice(sdk_client(key, base, voice.timeout), voice.openai_model)


def build_chain(voice: VoiceSettings, llm: LLMSettings) -> SpeechChain:
    return SpeechChain(build_providers(voice, llm), parse_chain(voice.tts), timeout=voice.timeout)
