"""A loopback stand-in for three speech APIs, so the real SDKs run against their wire formats.

- OpenAI (and any compatible server): ``POST /v1/audio/speech`` with JSON ``{model, input,
  voice, response_format}`` answers the audio bytes (here: a WAV, as ``response_format="wav"``
  asks).
- Gemini TTS: ``POST /{version}/models/{model}:generateContent`` with ``generationConfig.
  responseModalities = ["AUDIO"]`` answers a ``GenerateContentResponse`` whose first part is
  ``inlineData`` (``mimeType: audio/L16;codec=pcm;rate=24000``, base64 16-bit PCM).
- ElevenLabs: ``POST /v1/text-to-speech/{voice_id}?output_format=pcm_24000`` with JSON
  ``{text, model_id}`` answers raw 16-bit PCM.

The audio is a tone whose length is ``seconds_per_word`` per word of the text (at least
``min_seconds``), so a page can check that what it played is what this server sent. ``delay``
makes every answer that late (a provider's own latency); ``down`` answers 503 to everything.
``texts`` records each text asked for, with the API that was asked.
"""

from __future__ import annotations

import asyncio
import base64
import io
import math
import struct
import wave
from typing import Any

from aiohttp import web

from tests.loopback.base import LoopbackServer

RATE = 24_000


def tone_pcm(seconds: float, rate: int = RATE) -> bytes:
    frames = int(seconds * rate)
    return b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * n / rate))) for n in range(frames)
    )


def wav(pcm: bytes, rate: int = RATE) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as target:
        target.setnchannels(1)
        target.setsampwidth(2)
        target.setframerate(rate)
        target.writeframes(pcm)
    return out.getvalue()


class SpeechServer(LoopbackServer):
    def __init__(self, *, delay: float = 0.0, seconds_per_word: float = 0.12) -> None:
        super().__init__()
        self.delay = delay
        self.seconds_per_word = seconds_per_word
        self.min_seconds = 0.4
        self.down = False
        self.texts: list[tuple[str, str]] = []  # (api, text)
        self.sent: dict[str, bytes] = {}  # text -> the audio bytes answered (WAV or PCM)
        self.answered_at: list[float] = []  # loop time of each answer

    def seconds_for(self, text: str) -> float:
        return max(self.min_seconds, self.seconds_per_word * len(text.split()))

    def routes(self) -> list[web.RouteDef]:
        return [
            web.post("/v1/audio/speech", self._openai),
            web.post("/v1/text-to-speech/{voice}", self._elevenlabs),
            web.post("/{version}/models/{target}", self._gemini),
        ]

    async def _start(self, api: str, text: str) -> None:
        self.texts.append((api, text))
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.down:
            raise web.HTTPServiceUnavailable(
                text='{"error": {"message": "down", "code": 503}}', content_type="application/json"
            )

    def _pcm(self, text: str) -> bytes:
        return tone_pcm(self.seconds_for(text))

    async def _openai(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        text = str(body["input"])
        await self._start("openai", text)
        audio = wav(self._pcm(text))
        self.sent[text] = audio
        self.answered_at.append(asyncio.get_running_loop().time())
        return web.Response(body=audio, content_type="audio/wav")

    async def _elevenlabs(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        if request.query.get("output_format") != f"pcm_{RATE}":
            raise web.HTTPBadRequest(text="unexpected output_format")
        text = str(body["text"])
        await self._start("elevenlabs", text)
        pcm = self._pcm(text)
        self.sent[text] = pcm
        return web.Response(body=pcm, content_type="application/octet-stream")

    async def _gemini(self, request: web.Request) -> web.Response:
        body: dict[str, Any] = await request.json()
        config = body.get("generationConfig") or body.get("generation_config") or {}
        modalities = config.get("responseModalities") or config.get("response_modalities")
        if modalities != ["AUDIO"]:
            raise web.HTTPBadRequest(text="this server speaks only")
        text = str(body["contents"][0]["parts"][0]["text"])
        await self._start("gemini", text)
        pcm = self._pcm(text)
        self.sent[text] = pcm
        part = {
            "inlineData": {
                "mimeType": f"audio/L16;codec=pcm;rate={RATE}",
                "data": base64.b64encode(pcm).decode(),
            }
        }
        answer = {
            "candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP"}],
            "modelVersion": "tts-loopback",
        }
        return web.json_response(answer)
