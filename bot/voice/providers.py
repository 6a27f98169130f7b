"""Speech providers behind one small interface: a text and a voice in, audio a browser plays out.

Each vendor through its own SDK (OpenAI's ``audio.speech``, google-genai's ``generateContent``
with the audio modality, ElevenLabs' ``text_to_speech.convert``), espeak-ng from the
distribution as the local engine that needs no network, and ``TwinVoice`` for tests. Every
provider returns WAV (requested as such, or raw 16-bit PCM wrapped here), so the overlay knows
each item's duration and every browser plays it. A failure of any kind is a ``SpeechError``:
the chain (``bot.voice.chain``) moves to the next provider.
"""

from __future__ import annotations

import asyncio
import io
import shutil
import wave
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

WAV = "audio/wav"


class SpeechError(Exception):
    """A provider could not speak (down, refused, no audio in its answer)."""


@dataclass(frozen=True, slots=True)
class Spoken:
    """Audio for one text: the bytes, their type, how long they play, who made them."""

    audio: bytes
    mime: str
    seconds: float
    provider: str


class Voice(Protocol):
    """One speech provider (``name`` is how ``CHORUS_TTS`` names it)."""

    name: str

    async def speak(self, text: str, voice: str) -> Spoken: ...

    async def aclose(self) -> None: ...


def wav_seconds(audio: bytes) -> float:
    """How long a WAV plays; ``SpeechError`` when the bytes are no WAV."""
    try:
        with wave.open(io.BytesIO(audio)) as found:
            return float(found.getnframes()) / float(found.getframerate())
    except (wave.Error, EOFError) as exc:
        raise SpeechError(f"the audio is not a WAV: {exc}") from exc


def pcm_to_wav(pcm: bytes, rate: int, channels: int = 1) -> bytes:
    """Raw little-endian 16-bit PCM as a WAV file."""
    out = io.BytesIO()
    with wave.open(out, "wb") as target:
        target.setnchannels(channels)
        target.setsampwidth(2)
        target.setframerate(rate)
        target.writeframes(pcm)
    return out.getvalue()


def spoken_wav(audio: bytes, provider: str) -> Spoken:
    return Spoken(audio, WAV, wav_seconds(audio), provider)


class TwinVoice:
    """The in-memory provider for tests: ``make(text, voice)`` gives the WAV; ``fail`` makes
    every call a ``SpeechError``; ``calls`` records what it was asked."""

    def __init__(self, name: str = "twin", make: Callable[[str, str], bytes] | None = None):
        self.name = name
        self.make = make or (lambda text, voice: silence(0.05 * max(1, len(text.split()))))
        self.fail = False
        self.calls: list[tuple[str, str]] = []

    async def speak(self, text: str, voice: str) -> Spoken:
        self.calls.append((text, voice))
        if self.fail:
            raise SpeechError(f"{self.name} is down")
        return spoken_wav(self.make(text, voice), self.name)

    async def aclose(self) -> None:
        return None


def silence(seconds: float, rate: int = 16_000) -> bytes:
    return pcm_to_wav(b"\x00\x00" * int(seconds * rate), rate)


class EspeakVoice:
    """espeak-ng, the local engine: ``espeak-ng -v VOICE --stdout`` with the text on stdin."""

    name = "espeak"

    def __init__(self, binary: str = "espeak-ng", timeout: float = 20.0) -> None:
        self.binary = binary
        self.timeout = timeout

    async def speak(self, text: str, voice: str) -> Spoken:
        found = shutil.which(self.binary)
        if found is None:
            raise SpeechError(f"{self.binary} is not installed")
        proc = await asyncio.create_subprocess_exec(
            found,
            "-v",
            voice or "en",
            "--stdin",
            "--stdout",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await proc.communicate(text.encode())
        except TimeoutError as exc:
            proc.kill()
            await proc.wait()
            raise SpeechError(f"{self.binary} took longer than {self.timeout}s") from exc
        if proc.returncode != 0 or not out:
            raise SpeechError(f"{self.binary} failed: {err.decode(errors='replace')[:200]}")
        return spoken_wav(out, self.name)

    async def aclose(self) -> None:
        return None


class OpenAIVoice:
    """OpenAI's ``audio.speech`` (or any server speaking its ``/v1/audio/speech``), as WAV."""

    name = "openai"

    def __init__(self, client: Any, model: str) -> None:
        self.client = client
        self.model = model

    async def speak(self, text: str, voice: str) -> Spoken:
        try:
            found = await self.client.audio.speech.create(
                model=self.model, voice=voice, input=text, response_format="wav"
            )
            audio: bytes = found.content
        except Exception as exc:
            raise SpeechError(f"openai: {type(exc).__name__}: {exc}") from exc
        return spoken_wav(audio, self.name)

    async def aclose(self) -> None:
        await self.client.close()


class GeminiVoice:
    """Gemini TTS: ``generate_content`` with ``response_modalities=["AUDIO"]`` and a prebuilt
    voice; the answer's inline data is 16-bit PCM (its MIME type says the rate)."""

    name = "gemini"

    def __init__(self, client: Any, model: str) -> None:
        self.client = client
        self.model = model

    async def speak(self, text: str, voice: str) -> Spoken:
        from google.genai import types

        config = types.GenerateContentConfig(
            response_modalities=["AUDIO"],
            speech_config=types.SpeechConfig(
                voice_config=types.VoiceConfig(
                    prebuilt_voice_config=types.PrebuiltVoiceConfig(voice_name=voice)
                )
            ),
        )
        try:
            found = await self.client.aio.models.generate_content(
                model=self.model, contents=text, config=config
            )
            part = found.candidates[0].content.parts[0].inline_data
            pcm, mime = part.data, part.mime_type or ""
        except Exception as exc:
            raise SpeechError(f"gemini: {type(exc).__name__}: {exc}") from exc
        if not pcm:
            raise SpeechError("gemini: no audio in the answer")
        return spoken_wav(pcm_to_wav(pcm, _rate(mime, 24_000)), self.name)

    async def aclose(self) -> None:
        await self.client.aio.aclose()


class ElevenLabsVoice:
    """ElevenLabs' ``text_to_speech.convert`` asked for 16-bit PCM at 24 kHz."""

    name = "elevenlabs"
    rate = 24_000

    def __init__(self, client: Any, model: str) -> None:
        self.client = client
        self.model = model

    async def speak(self, text: str, voice: str) -> Spoken:
        try:
            chunks = self.client.text_to_speech.convert(
                voice, text=text, model_id=self.model, output_format=f"pcm_{self.rate}"
            )
            pcm = b"".join([chunk async for chunk in chunks])
        except Exception as exc:
            raise SpeechError(f"elevenlabs: {type(exc).__name__}: {exc}") from exc
        if not pcm:
            raise SpeechError("elevenlabs: no audio in the answer")
        return spoken_wav(pcm_to_wav(pcm, self.rate), self.name)

    async def aclose(self) -> None:
        return None


def _rate(mime: str, default: int) -> int:
    for part in mime.split(";"):
        name, _, value = part.strip().partition("=")
        if name == "rate" and value.isdigit():
            return int(value)
    return default
