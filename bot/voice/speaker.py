"""What a channel says aloud, worker side: answers sentence by sentence, read-aloud stream events,
and the moderators' ``!skip`` / ``!tts`` commands.

A worker never synthesizes: it puts the text to speak on the channel's queue (``VoiceQueue``, a
Redis stream), and the process serving the overlay turns it into audio when an overlay reads it
(``bot.admin.overlay``). So speech costs a worker nothing while no overlay is connected: the
channel's controls and the watching flag are read at most once per ``control_ttl`` seconds per
channel, and with no overlay watching (or speech paused) nothing is queued.

- **answers**: ``open`` gives a ``ReplySink`` for a turn; as the model streams, each complete
  sentence passes ``check`` (the outbound safety guard every reply gets) and is queued at once,
  so the overlay speaks before the answer is finished; ``finish`` queues what the final answer
  adds after the streamed sentences. A sentence the guard changes ends the turn's speech.
- **stream events**: a cheer of at least ``cheer_min_bits``, a Super Chat or Super Sticker, a
  Twitch channel-point redemption of a reward in ``rewards`` is read with the viewer's name
  (``prompts/voice/*``), each channel's in the order they arrived (``start_event``); the
  message passed the inbound rules before it got here (the router's screen) and the spoken text passes ``check`` too: a blocked word never reaches a
  speech provider, and the overlay shows exactly what it says.
- **limits**: characters per hour per channel and per viewer (``SpokenChars``, counted before
  an item is queued); over a limit nothing is queued and the overlay shows a notice, once an
  hour per channel or viewer (``prompts/voice/limit_*``).
- **commands** (moderators and the broadcaster): ``!skip``, ``!tts pause``, ``!tts resume``,
  ``!tts volume N``, applied off the consume loop and not answered in chat. Pause is a flag
  every worker reads (within ``control_ttl``), plus an event that stops the overlay at once.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from cachetools import TTLCache

import prompts
from bot.events import ChatMessage, ConversationKey, StreamEvent, StreamEventKind
from bot.settings import Settings
from bot.settings.scopes import LIVE_PLATFORMS, resolve
from bot.state.voice import Control, SpokenChars, VoiceQueue

log = logging.getLogger("chorus.voice")

Check = Callable[[ChatMessage, str], str]

_SENTENCE = re.compile(r"(.+?[.!?…]+[\"')\]]*)(\s+)", re.S)


def sentences(text: str) -> tuple[list[str], str]:
    """The complete sentences at the start of ``text`` and the unfinished rest."""
    found: list[str] = []
    end = 0
    for match in _SENTENCE.finditer(text):
        if match.start() != end:
            break
        found.append(match.group(1).strip())
        end = match.end()
    return [s for s in found if s], text[end:]


@dataclass(frozen=True, slots=True)
class VoicePolicy:
    """The voice settings of one channel (deployment, then its scopes)."""

    enabled: bool
    answers: bool
    cheer_min_bits: int
    super_chats: bool
    rewards: frozenset[str]  # reward titles (casefolded) and ids read aloud; "*": every one
    tts: tuple[str, ...]
    max_chars: int
    channel_chars_hour: int
    user_chars_hour: int


def policy_for(settings: Settings, message: ChatMessage) -> VoicePolicy:
    conv = message.conversation
    values = resolve(settings.file.scopes, conv.platform, message.server, conv.channel).values
    base = settings.voice

    def get(name: str) -> Any:
        return values.get(f"voice.{name}", getattr(base, name))

    return VoicePolicy(
        enabled=bool(get("enabled")) and conv.platform in LIVE_PLATFORMS,
        answers=bool(get("answers")),
        cheer_min_bits=int(get("cheer_min_bits")),
        super_chats=bool(get("super_chats")),
        rewards=frozenset(str(reward).casefold() for reward in get("rewards")),
        tts=tuple(get("tts")),
        max_chars=base.max_chars,
        channel_chars_hour=int(get("channel_chars_hour")),
        user_chars_hour=int(get("user_chars_hour")),
    )


def read_aloud(event: StreamEvent, rewards: frozenset[str]) -> bool:
    """Whether a redeemed reward is one the channel reads aloud (by title, any case, or id)."""
    ids = {event.reward.casefold(), (event.reward_id or "").casefold()} - {""}
    return "*" in rewards or bool(ids & rewards)


def clip(text: str, limit: int) -> str:
    """``text`` cut at a word to at most ``limit`` characters."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0]
    return cut or text[:limit]


def limit_notice(limit: str, name: str) -> str:
    """What the overlay shows when the channel's (``channel``) or a viewer's (``user``) speech
    characters for the hour are spent."""
    if limit == "channel":
        return prompts.render("voice/limit_channel")
    return prompts.render("voice/limit_user", name=name)


class Speaker:
    """The worker side of speech (see the module docstring)."""

    def __init__(
        self,
        queue: VoiceQueue,
        settings: Callable[[], Settings],
        *,
        check: Check,
        control_ttl: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue = queue
        self.settings = settings
        self.check = check
        self._controls: TTLCache[ConversationKey, Control] = TTLCache(
            maxsize=10_000, ttl=control_ttl, timer=clock
        )
        self.queued = 0  # items put on queues (for tests and the benchmark)
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_event: dict[ConversationKey, asyncio.Task[None]] = {}  # each channel's newest
        self._epoch = 0  # changes with every pause or resume applied here
        self.chars = SpokenChars(queue.redis)

    def policy(self, message: ChatMessage) -> VoicePolicy | None:
        if message.conversation.platform not in LIVE_PLATFORMS:
            return None
        found = policy_for(self.settings(), message)
        return found if found.enabled else None

    async def control(self, conv: ConversationKey, fresh: bool = False) -> Control:
        found = None if fresh else self._controls.get(conv)
        if found is None:
            epoch = self._epoch
            found = await self.queue.control(conv)
            if epoch == self._epoch:  # no command here changed the controls during the read
                self._controls[conv] = found
        return found

    async def say(
        self, message: ChatMessage, text: str, *, kind: str, policy: VoicePolicy, **extra: Any
    ) -> bool:
        """Queue ``text`` (checked, clipped) for the channel's overlay; False when nothing was
        queued (no overlay watching, paused, blocked)."""
        control = await self.control(message.conversation)
        if not control.watching or control.paused:
            return False
        text = clip(text.strip(), policy.max_chars)
        if not text or self.check(message, text) != text:
            return False
        if not await self._within_limits(message, text, policy):
            return False
        event = {
            "kind": kind,
            "text": text,
            "name": message.author.display_name or message.author.id,
            "user_id": message.author.id,
            "message": clip(message.text, 300),
            "answer_to": message.id,
            "tts": list(policy.tts),
            "at": time.time(),
            **extra,
        }
        await self.queue.push(message.conversation, event)
        self.queued += 1
        return True

    async def _within_limits(self, message: ChatMessage, text: str, policy: VoicePolicy) -> bool:
        """Count ``text`` against the channel's and the viewer's characters this hour; over a
        limit, the overlay shows the notice once an hour and nothing is spoken."""
        now = datetime.now(UTC)
        over = await self.chars.take(
            message.conversation,
            message.author.id,
            len(text),
            channel_limit=policy.channel_chars_hour,
            user_limit=policy.user_chars_hour,
            hour=now.strftime("%Y%m%d%H"),
            ttl=2 * 3600,
        )
        if over is None:
            return True
        who = "" if over == "channel" else message.author.id
        if await self.chars.first_notice(message.conversation, who, 3600):
            name = message.author.display_name or message.author.id
            notice = limit_notice(over, name)
            await self.queue.push(message.conversation, {"kind": "notice", "text": notice})
        log.info("speech limit reached", extra={"limit": over})
        return False

    def open(self, message: ChatMessage) -> SpeechSink | None:
        """A sink that speaks the answer to ``message`` as it streams, or None."""
        policy = self.policy(message)
        if policy is None or not policy.answers:
            return None
        return SpeechSink(self, message, policy)

    async def event(self, message: ChatMessage) -> bool:
        """Read a stream event aloud when the channel's settings say so."""
        found = message.stream_event
        policy = self.policy(message)
        if found is None or policy is None:
            return False
        name = found.user_name or message.author.display_name or message.author.id
        text = message.text.strip()
        if found.kind is StreamEventKind.CHEER and (found.bits or 0) >= policy.cheer_min_bits:
            said = prompts.render("voice/cheer", name=name, bits=found.bits or 0, text=text)
        elif found.kind is StreamEventKind.SUPER_CHAT and policy.super_chats:
            said = prompts.render(
                "voice/super_chat", name=name, amount=found.amount or "", text=text
            )
        elif found.kind is StreamEventKind.SUPER_STICKER and policy.super_chats:
            said = prompts.render("voice/super_sticker", name=name, amount=found.amount or "")
        elif found.kind is StreamEventKind.REDEMPTION and read_aloud(found, policy.rewards):
            said = prompts.render(
                "voice/redemption" if text else "voice/redemption_plain",
                name=name,
                reward=found.reward,
                text=text,
            )
        else:
            return False
        return await self.say(message, said, kind=found.kind.value, policy=policy)

    def is_command(self, message: ChatMessage) -> bool:
        """Whether ``message`` is a moderator's ``!skip`` / ``!tts ...`` where speech is on."""
        words = message.text.strip().lower().split()
        return (
            bool(words)
            and words[0] in ("!skip", "!tts")
            and message.author.is_moderator
            and self.policy(message) is not None
        )

    def start(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[None]:
        """Run ``work`` off the consume loop (a command, a read-aloud event); never fails it."""
        task = asyncio.create_task(self._quiet(work))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def start_event(self, message: ChatMessage) -> None:
        """Read ``message``'s stream event aloud off the consume loop (``event``), once the
        channel's events before it are queued: each step reads the store, so two events started
        side by side could otherwise reach the queue in either order."""
        conv = message.conversation
        before = self._last_event.get(conv)
        task = self.start(_after(before, self.event(message)))
        self._last_event[conv] = task
        task.add_done_callback(lambda done: self._forget_event(conv, done))

    def _forget_event(self, conv: ConversationKey, done: asyncio.Task[None]) -> None:
        if self._last_event.get(conv) is done:
            del self._last_event[conv]

    async def _quiet(self, work: Coroutine[Any, Any, Any]) -> None:
        try:
            await work
        except Exception as exc:
            log.warning("speech step failed", extra={"error": type(exc).__name__})

    async def command(self, message: ChatMessage) -> str:
        """Apply a moderator's command (``is_command``); what it did, for the log."""
        words = message.text.strip().lower().split()
        conv = message.conversation
        if words[0] == "!skip":
            await self.queue.push(conv, {"kind": "skip"})
            return "skip"
        action = words[1] if len(words) > 1 else ""
        if action in ("pause", "resume"):
            await self.queue.set_control(conv, paused="1" if action == "pause" else "0")
            await self.queue.push(conv, {"kind": action})
            self._epoch += 1
            self._controls.pop(conv, None)
            return action
        if action == "volume" and len(words) > 2 and words[2].isdigit():
            volume = max(0, min(100, int(words[2])))
            await self.queue.set_control(conv, volume=str(volume))
            await self.queue.push(conv, {"kind": "volume", "volume": volume})
            return "volume"
        return "unknown"

    async def aclose(self) -> None:
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)


async def _after(before: asyncio.Task[None] | None, work: Coroutine[Any, Any, Any]) -> Any:
    """``work``, run once ``before`` has ended (``before`` never raises: ``Speaker._quiet``)."""
    try:
        if before is not None:
            await asyncio.wait([before])
    except BaseException:
        work.close()  # cancelled while waiting: never started
        raise
    return await work


class SpeechSink:
    """One turn's speech (a ``ReplySink``): complete sentences are queued as they arrive."""

    def __init__(self, speaker: Speaker, message: ChatMessage, policy: VoicePolicy) -> None:
        self.speaker = speaker
        self.message = message
        self.policy = policy
        self.buffer = ""
        self.spoken: list[str] = []
        self.stopped = False

    async def text(self, delta: str) -> None:
        self.buffer += delta
        found, self.buffer = sentences(self.buffer)
        for sentence in found:
            await self._say(sentence)

    async def reset(self) -> None:
        self.buffer = ""

    async def working(self, tools: Sequence[str]) -> None:
        return None

    async def finish(self, final: str) -> None:
        """Speak what the final answer says after the sentences already spoken."""
        rest = final.strip()
        for sentence in self.spoken:
            at = rest.find(sentence)
            if at < 0:
                return  # the final differs from what streamed: say nothing more
            rest = rest[at + len(sentence) :]
        if rest.strip():
            await self._say(rest.strip())

    async def _say(self, sentence: str) -> None:
        if self.stopped:
            return
        if self.speaker.check(self.message, sentence) != sentence:
            self.stopped = True
            return
        self.spoken.append(sentence)
        try:
            await self.speaker.say(self.message, sentence, kind="answer", policy=self.policy)
        except Exception as exc:  # never the turn's failure
            self.stopped = True
            log.warning("could not queue speech", extra={"error": type(exc).__name__})
