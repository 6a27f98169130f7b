"""One contract for every speech provider, and the chain over them.

Each provider runs its real code: OpenAI's SDK, google-genai and ElevenLabs' SDK against the
loopback speech server (their wire formats: tests/loopback/speech_server.py), espeak-ng as
installed, and the in-memory twin. Each must turn a text into a WAV that plays as long as its
audio says, and turn a provider that is down into a ``SpeechError``. The chain falls back to the
next link (espeak-ng last), gives up on a slow link after its timeout, and answers a repeated
(voice, text) from its cache. espeak-ng is a process: the file is marked e2e.
"""

from __future__ import annotations

import io
import wave
from collections.abc import AsyncIterator

import pytest

from bot.settings import settings_from
from bot.voice.chain import SpeechChain, build_providers, parse_chain
from bot.voice.providers import SpeechError, TwinVoice, Voice, silence
from tests.loopback.speech_server import SpeechServer

pytestmark = pytest.mark.e2e

VENDORS = ("openai", "gemini", "elevenlabs")
VOICES = {"openai": "alloy", "gemini": "Kore", "elevenlabs": "voice-1", "espeak": "en"}
TEXT = "Thanks for the follow, Ada. Enjoy the stream."


@pytest.fixture
async def server() -> AsyncIterator[SpeechServer]:
    async with SpeechServer() as running:
        yield running


def providers_for(server: SpeechServer) -> dict[str, Voice]:
    settings = settings_from(
        {
            "CHORUS_TTS": "openai:alloy,gemini:Kore,elevenlabs:voice-1,espeak:en",
            "OPENAI_API_KEY": "k",
            "OPENAI_BASE_URL": f"{server.url}/v1",
            "GEMINI_API_KEY": "k",
            "GOOGLE_GEMINI_BASE_URL": server.url,
            "ELEVENLABS_API_KEY": "k",
            "ELEVENLABS_BASE_URL": server.url,
        }
    )
    return build_providers(settings.voice, settings.llm)


def frames(audio: bytes) -> tuple[int, int]:
    with wave.open(io.BytesIO(audio)) as found:
        return found.getnframes(), found.getframerate()


@pytest.mark.parametrize("name", [*VENDORS, "espeak", "twin"])
async def test_a_provider_speaks_a_text_as_a_wav_of_its_length(
    server: SpeechServer, name: str
) -> None:
    providers = providers_for(server)
    provider = TwinVoice() if name == "twin" else providers[name]
    try:
        spoken = await provider.speak(TEXT, VOICES.get(name, "x"))
    finally:
        for each in providers.values():
            await each.aclose()
    assert spoken.mime == "audio/wav"
    count, rate = frames(spoken.audio)
    assert spoken.seconds == pytest.approx(count / rate)
    assert spoken.seconds > 0.3
    if name in VENDORS:
        assert server.texts == [(name, TEXT)]
        assert spoken.seconds == pytest.approx(server.seconds_for(TEXT), abs=0.01)
        sent = server.sent[TEXT]
        assert sent in spoken.audio  # the vendor's bytes (PCM wrapped, or the WAV as sent)


@pytest.mark.parametrize("name", [*VENDORS, "twin"])
async def test_a_provider_that_is_down_is_a_speech_error(server: SpeechServer, name: str) -> None:
    server.down = True
    providers = providers_for(server)
    twin = TwinVoice()
    twin.fail = True
    provider = twin if name == "twin" else providers[name]
    try:
        with pytest.raises(SpeechError):
            await provider.speak(TEXT, VOICES.get(name, "x"))
    finally:
        for each in providers.values():
            await each.aclose()


async def test_the_chain_falls_back_to_espeak_when_the_vendor_is_down(
    server: SpeechServer,
) -> None:
    server.down = True
    providers = providers_for(server)
    chain = SpeechChain(providers, parse_chain(["openai:alloy"]))
    try:
        spoken = await chain.speak("The vendor is down.")
    finally:
        await chain.aclose()
    assert spoken.provider == "espeak"
    assert server.texts == [("openai", "The vendor is down.")]
    assert spoken.seconds > 0.3


async def test_a_slow_link_is_given_up_after_the_timeout() -> None:
    slow, fast = TwinVoice("slow"), TwinVoice("fast")

    async def never(text: str, voice: str) -> object:
        import asyncio

        await asyncio.sleep(3600)
        raise AssertionError("unreachable")

    slow.speak = never  # type: ignore[method-assign,assignment]
    chain = SpeechChain({"slow": slow, "fast": fast}, [("slow", "a"), ("fast", "b")], timeout=0.2)
    spoken = await chain.speak("hello")
    assert spoken.provider == "fast"
    assert fast.calls == [("hello", "b")]


async def test_repeated_lines_are_spoken_from_the_cache() -> None:
    twin = TwinVoice(make=lambda text, voice: silence(0.2))
    chain = SpeechChain({"twin": twin}, [("twin", "v")])
    first = await chain.speak("thanks!")
    again = await chain.speak("thanks!")
    other_voice = await chain.speak("thanks!", [("twin", "w")])
    assert again is first
    assert other_voice is not first
    assert twin.calls == [("thanks!", "v"), ("thanks!", "w")]
    assert chain.hits == 1


async def test_every_link_failing_says_each_reason() -> None:
    twin = TwinVoice()
    twin.fail = True
    chain = SpeechChain({"twin": twin}, [("twin", "v"), ("missing", "x")])
    with pytest.raises(SpeechError) as failed:
        await chain.speak("hi")
    assert "twin is down" in str(failed.value)
    assert "missing: not configured" in str(failed.value)


def test_the_chain_always_ends_with_espeak() -> None:
    assert parse_chain(["openai:alloy"]) == [("openai", "alloy"), ("espeak", "en")]
    assert parse_chain(["espeak:de", "openai:alloy"]) == [("espeak", "de"), ("openai", "alloy")]
