"""The stream overlay: ``/overlay/<channel>?key=…`` for an OBS browser source, its events, its
audio, and the dashboard's page of each channel's speech queue with the moderators' controls
(``/voice``: skip, pause, resume, volume, a new key; behind the login, operators only).

The overlay's routes are open to the network without the dashboard's login: each checks the
channel's own key (``bot.state.voice.OverlayKeys``: random, rotatable, never the admin token)
and answers 403 with an empty body when it is missing or old. Events reach the page over SSE:
the server reads the channel's queue (a Redis stream every worker writes, ``VoiceQueue``) from
the page's last event id (``Last-Event-ID``, sent by ``EventSource`` when it reconnects), so a
page that reconnects resumes without replaying what it already spoke; a page that opens reads
only what comes next. Before an item is sent, its audio is made here (``bot.voice.chain``:
providers in order, espeak-ng last, cached by voice and text) and kept for the page to fetch.
While a page is connected the channel is marked watched; with none connected workers queue
nothing. Items read while speech is paused are dropped. Each item spoken is counted: its
estimated cost (``CHORUS_PRICES``, per million characters of the provider's speech model) goes
into the day's spend the cost cap reads, a ``spoken`` record (provider, time, characters, cost)
into the channel's turn log; once the day's cap is reached only espeak-ng (free) speaks.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiohttp import web
from cachetools import LRUCache

from bot.events import ConversationKey
from bot.llm.pricing import PriceTable, load_prices, speech_cost
from bot.settings import Settings
from bot.state.client import Redis
from bot.state.cost import CostLedger, micro
from bot.state.turnlog import TurnRecord
from bot.state.voice import OverlayKeys, VoiceQueue, entry, log_spoken
from bot.voice.chain import Link, SpeechChain, build_chain, parse_chain
from bot.voice.providers import SpeechError, Spoken

log = logging.getLogger("chorus.admin.overlay")

Render = Callable[..., web.Response]  # AdminServer.render(request, template, **values)
Audited = Callable[..., None]  # AdminServer.audit(request, rule, action, **where)

PAGES = Path(__file__).resolve().parent.parent.parent / "prompts" / "admin"
SPOKEN = frozenset({"answer", "cheer", "super_chat", "super_sticker", "redemption"})
CONTROLS = frozenset({"skip", "pause", "resume", "volume", "notice"})
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; media-src 'self' blob:; "
    "connect-src 'self'; img-src 'self' data:"
)


def _conv(request: web.Request) -> ConversationKey:
    try:
        return ConversationKey.parse(request.match_info["conv"])
    except ValueError:
        raise web.HTTPNotFound(text="") from None


class Overlay:
    """The overlay's routes over one Redis and the process's settings."""

    def __init__(
        self,
        redis: Redis,
        settings: Callable[[], Settings],
        chain: SpeechChain | None = None,
        *,
        render: Render | None = None,
        audit: Audited | None = None,
    ) -> None:
        self.redis = redis
        self.render = render
        self.audit = audit
        self.settings = settings
        self.keys = OverlayKeys(redis)
        self.queue = VoiceQueue(redis)
        self._chain = chain
        self.audio: LRUCache[str, Spoken] = LRUCache(
            maxsize=64 * 1024 * 1024, getsizeof=lambda spoken: len(spoken.audio) + 1
        )
        self.block_ms = 1000
        self._prices: PriceTable | None = None

    @property
    def chain(self) -> SpeechChain:
        if self._chain is None:
            settings = self.settings()
            self._chain = build_chain(settings.voice, settings.llm)
        return self._chain

    async def aclose(self, app: web.Application | None = None) -> None:
        """Close the speech providers' clients (the dashboard's ``on_cleanup``)."""
        if self._chain is not None:
            await self._chain.aclose()
            self._chain = None

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get("/overlay/static/overlay.js", self.script),
            web.get("/overlay/static/overlay.css", self.style),
            web.get("/overlay/{conv}", self.page),
            web.get("/overlay/{conv}/events", self.events),
            web.get("/overlay/{conv}/audio/{id}", self.audio_of),
            web.get("/voice", self.dashboard),
            web.post("/voice/{conv}/{action}", self.control),
        ]

    # -- the dashboard's page (behind its login; a change needs the operator role) -------------
    async def dashboard(self, request: web.Request) -> web.Response:
        """Each channel with an overlay: its URL, pause and volume, and its recent queue."""
        assert self.render is not None
        channels = []
        for conv in await self.keys.channels():
            control = await self.queue.control(conv)
            recent = await self.queue.recent(conv, 15)
            channels.append(
                {
                    "conv": conv,
                    "url": f"/overlay/{conv}?key={await self.keys.get(conv)}",
                    "control": control,
                    "recent": [
                        {
                            "id": e["id"],
                            "kind": e.get("kind", ""),
                            "name": e.get("name", ""),
                            "text": str(e.get("text") or e.get("volume") or ""),
                        }
                        for e in recent
                    ],
                }
            )
        return self.render(request, "voice", channels=channels)

    async def control(self, request: web.Request) -> web.StreamResponse:
        """Skip, pause, resume, set the volume, or rotate the key: what ``!skip`` / ``!tts``
        and ``chorus overlay key --rotate`` do."""
        conv = _conv(request)
        action = request.match_info["action"]
        form = await request.post()
        if action == "skip":
            await self.queue.push(conv, {"kind": "skip"})
        elif action in ("pause", "resume"):
            await self.queue.set_control(conv, paused="1" if action == "pause" else "0")
            await self.queue.push(conv, {"kind": action})
        elif action == "volume":
            volume = max(0, min(100, int(str(form.get("volume", "100")) or 100)))
            await self.queue.set_control(conv, volume=str(volume))
            await self.queue.push(conv, {"kind": "volume", "volume": volume})
        elif action == "rotate":
            await self.keys.rotate(conv)
        else:
            raise web.HTTPNotFound(text="no such action")
        if self.audit is not None:
            self.audit(request, f"voice:{action}", action, conversation=str(conv))
        raise web.HTTPSeeOther("/voice")

    async def _allowed(self, request: web.Request) -> ConversationKey:
        conv = _conv(request)
        if not await self.keys.check(conv, request.query.get("key", "")):
            raise web.HTTPForbidden(text="")
        return conv

    async def page(self, request: web.Request) -> web.StreamResponse:
        await self._allowed(request)
        return await _send(request, (PAGES / "overlay.html").read_bytes(), "text/html")

    async def script(self, request: web.Request) -> web.StreamResponse:
        return await _send(request, (PAGES / "overlay.js").read_bytes(), "text/javascript")

    async def style(self, request: web.Request) -> web.StreamResponse:
        return await _send(request, (PAGES / "overlay.css").read_bytes(), "text/css")

    async def audio_of(self, request: web.Request) -> web.StreamResponse:
        conv = await self._allowed(request)
        entry_id = request.match_info["id"]
        spoken = self.audio.get(f"{conv}|{entry_id}")
        if spoken is None:  # another process read it first, or it left the cache
            found = await entry(self.redis, conv, entry_id)
            if found is None or found.get("kind") not in SPOKEN:
                raise web.HTTPNotFound(text="")
            spoken = await self.speak(conv, entry_id, found)
        return await _send(request, spoken.audio, spoken.mime)

    async def speak(self, conv: ConversationKey, entry_id: str, event: dict[str, Any]) -> Spoken:
        """The item's audio (kept for the page to fetch), its cost counted in the day's cost
        (the cap's ledger) and a ``spoken`` record in the channel's turn log. With the day's
        cost cap reached, only the free local voice speaks."""
        settings = self.settings()
        links: list[Link] = parse_chain(event.get("tts") or settings.voice.tts)
        ledger = CostLedger(self.redis, settings.state.bus_namespace)
        cap = settings.quota.cost_usd_per_day
        now = datetime.now(UTC)
        if cap is not None and (await ledger.today(now)).spent >= micro(cap):
            links = [link for link in links if link[0] == "espeak"] or [("espeak", "en")]
        text = str(event["text"])
        started = time.monotonic()
        spoken = await self.chain.speak(text, links)
        took = time.monotonic() - started
        self.audio[f"{conv}|{entry_id}"] = spoken
        model = self.models(settings).get(spoken.provider, "")
        cost = speech_cost(self.prices(settings), model, len(text)) if model else 0.0
        if cost > 0:
            await ledger.settle(ledger.reservation(f"speech:{entry_id}", 0, now), micro(cost))
        record = TurnRecord(
            at=now.timestamp(),
            message_id=str(event.get("answer_to") or entry_id),
            user_id=str(event.get("user_id", "")),
            user_name=str(event.get("name", "")),
            decision="spoken",
            reason=str(event.get("kind", "")),
            model=f"{spoken.provider}:{model}" if model else spoken.provider,
            latency_ms=int(took * 1000),
            cost_usd=cost,
            speech_ms=int(spoken.seconds * 1000),
            speech_chars=len(text),
        )
        await log_spoken(self.redis, conv, record)
        return spoken

    def prices(self, settings: Settings) -> PriceTable:
        if self._prices is None:
            self._prices = load_prices(settings.metrics.prices)
        return self._prices

    @staticmethod
    def models(settings: Settings) -> dict[str, str]:
        voice = settings.voice
        return {
            "openai": voice.openai_model,
            "gemini": voice.gemini_model,
            "elevenlabs": voice.elevenlabs_model,
        }

    async def events(self, request: web.Request) -> web.StreamResponse:
        conv = await self._allowed(request)
        key = request.query["key"]
        after = request.headers.get("Last-Event-ID") or await self.queue.last_id(conv)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-store",
                "Content-Security-Policy": CSP,
                "X-Content-Type-Options": "nosniff",
            }
        )
        await self.queue.watched(conv)  # from now on, workers queue for this channel
        await response.prepare(request)
        await response.write(b"retry: 1000\n\n")
        control = await self.queue.control(conv)
        paused = control.paused
        await _emit(response, None, "volume", {"kind": "volume", "volume": control.volume})
        max_seconds = self.settings().voice.max_seconds
        with contextlib.suppress(ConnectionResetError):  # the page left (OBS hid it, a reload)
            await self._follow(response, conv, key, after, paused, max_seconds)
        return response

    async def _follow(
        self,
        response: web.StreamResponse,
        conv: ConversationKey,
        key: str,
        after: str,
        paused: bool,
        max_seconds: float,
    ) -> None:
        """Send the channel's events after ``after`` as they come (until the page leaves).

        The page plays items one after another; ``playing`` is when each item sent is due to end
        (by its duration, cut at ``max_seconds``), so the items still waiting there are known
        here, and an item beyond ``CHORUS_TTS_QUEUE_MAX`` waiting is dropped before any
        provider is paid to speak it. A skip or a pause empties the page's queue as it does."""
        playing: list[float] = []
        queue_max = self.settings().voice.queue_max
        while True:
            await self.queue.watched(conv)
            found = await self.queue.read(conv, after, self.block_ms)
            if not found:
                await response.write(b": idle\n\n")
                continue
            for entry_id, event in found:
                after = entry_id
                kind = str(event.get("kind", ""))
                if kind in ("pause", "resume"):
                    paused = kind == "pause"
                if kind == "pause":
                    playing.clear()
                elif kind == "skip" and playing:
                    playing = _skipped(playing, time.monotonic())
                if kind in CONTROLS:
                    await _emit(response, entry_id, kind, event)
                    continue
                if kind not in SPOKEN or paused:
                    continue
                now = time.monotonic()
                playing = [end for end in playing if end > now]
                if len(playing) > queue_max:  # one plays, queue_max wait: the page is full
                    log.info("overlay queue full; an item is dropped", extra={"kind": kind})
                    continue
                try:
                    spoken = await self.speak(conv, entry_id, event)
                except SpeechError as exc:
                    log.warning("nothing could speak an item", extra={"error": str(exc)[:300]})
                    continue
                shown = {
                    key_: event.get(key_, "") for key_ in ("kind", "text", "name", "message")
                } | {
                    "answer_to": event.get("answer_to", ""),
                    "audio": f"/overlay/{conv}/audio/{entry_id}?key={key}",
                    "seconds": spoken.seconds,
                    "max_seconds": max_seconds,
                    "provider": spoken.provider,
                }
                start = playing[-1] if playing else time.monotonic()
                playing.append(start + min(spoken.seconds, max_seconds))
                await _emit(response, entry_id, "say", shown)


def _skipped(playing: list[float], now: float) -> list[float]:
    """The schedule once the item playing at ``now`` stopped: the next ones start now."""
    cut = playing[0] - now
    return [end - cut for end in playing[1:]]


async def _emit(
    response: web.StreamResponse, entry_id: str | None, kind: str, data: dict[str, Any]
) -> None:
    head = f"id: {entry_id}\n" if entry_id else ""
    await response.write(f"{head}event: {kind}\ndata: {json.dumps(data)}\n\n".encode())


async def _send(request: web.Request, body: bytes, mime: str) -> web.StreamResponse:
    """A whole body, as a stream response (the dashboard's masker reads text responses only)."""
    response = web.StreamResponse(
        headers={
            "Content-Type": mime,
            "Cache-Control": "no-store",
            "Content-Security-Policy": CSP,
            "X-Content-Type-Options": "nosniff",
            "Referrer-Policy": "no-referrer",
        }
    )
    response.content_length = len(body)
    await response.prepare(request)
    await response.write(body)
    await response.write_eof()
    return response
