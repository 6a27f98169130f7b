"""Slash-command answers across gateway processes: each one reaches the process that holds it.

With the shards spread over several gateway processes, the answer to a slash command is read
off the bus by whichever process holds its conversation's partition, not necessarily the one
that received the interaction (deferred privately, waiting in ``_on_command``). The answer is
routed to that holder (``bot/state/interactions.py`` says how and why not the other way):

- ``_hold_interaction`` marks a command as this process's before it is published;
  ``_release_interaction`` marks it answered once the follow-up is decided.
- ``_answered_elsewhere`` is asked for every answer this process holds no waiting command for:
  an answer to a command held by another process is forwarded to it (the caller acks the bus
  entry only afterwards), one to a command already answered, or held by a process that is gone,
  is dropped with a log line; neither is ever posted in the channel. When the store cannot tell,
  the answer is dropped too: a private answer must not be posted in public.
- ``_read_forwarded`` (a task while the adapter runs) reads the answers forwarded to this
  process and resolves the waiting commands, which send their follow-ups themselves.
- ``_held`` keeps streamed drafts of such answers off public channels (the holder shows none:
  a slash command is answered once, at the end).

Nothing here runs when ``pending`` is None: one gateway process, or one holding every shard.
"""

from __future__ import annotations

import asyncio
import logging

from pydantic import ValidationError

from bot.events import Reply
from bot.settings import DiscordSettings
from bot.state.interactions import ANSWERED, PendingInteractions

log = logging.getLogger("chorus.discord")

# Seconds one inbox read blocks; each round renews the liveness mark (its TTL: 15 s). Well
# under the store client's read timeout (redis-py's defaults to the 5 s connect timeout).
INBOX_WAIT = 2.0
RETRY_AFTER = (0.5, 5.0)  # seconds before reading the inbox again after a store error: doubling


class RoutedAnswers:
    """What ``DiscordAdapter`` does with slash commands held across gateway processes."""

    settings: DiscordSettings
    # Set when this process holds only some of the shards (shards.ShardedParts._plan_shards).
    pending: PendingInteractions | None = None
    _interactions: dict[str, asyncio.Future[Reply]]  # the commands waiting here, by id

    def _hold_ttl(self) -> float:
        return self.settings.command_timeout + 60

    async def _hold_interaction(self, interaction_id: str) -> None:
        if self.pending is not None:
            try:
                await self.pending.hold(interaction_id, self._hold_ttl())
            except Exception:  # its answer may then be posted by another process, never lost
                log.warning("could not mark a slash command as held", exc_info=True)

    async def _release_interaction(self, interaction_id: str) -> None:
        if self.pending is not None:
            try:
                await self.pending.release(interaction_id, self._hold_ttl())
            except Exception:  # the mark still names this process, which drops late answers
                log.warning("could not mark a slash command answered", exc_info=True)

    async def _held(self, reply_to_id: str | None) -> bool:
        """The answer is to a slash command (held by some process, or answered): never shown
        here. When the store cannot tell, it is held back too."""
        if self.pending is None or not reply_to_id:
            return False
        try:
            return await self.pending.held(reply_to_id)
        except Exception:
            log.warning(
                "could not tell whether an answer is private; not shown",
                extra={"reply_to_id": reply_to_id},
                exc_info=True,
            )
            return True

    async def _answered_elsewhere(self, reply: Reply) -> bool:
        """True when ``reply`` answers a slash command no one waits for here: forwarded to its
        holder, or dropped; never to be posted. False: an ordinary answer, to post."""
        pending, reply_to_id = self.pending, reply.reply_to_id
        if pending is None or not reply_to_id:
            return False
        where = {"reply_to_id": reply_to_id}
        try:
            holder = await pending.holder_of(reply_to_id)
            if holder is None:
                return False
            if holder in (ANSWERED, pending.holder):  # handed out again, or too late
                log.info("a slash command's answer came after its follow-up; dropped", extra=where)
                return True
            alive = await pending.forward(holder, reply.model_dump_json(), self._hold_ttl())
        except Exception:
            log.warning(
                "could not route a slash command's answer to its gateway process; dropped, "
                "not posted in public",
                extra=where,
                exc_info=True,
            )
            return True
        if alive:
            log.info("slash command answer forwarded to its gateway process", extra=where)
        else:
            log.warning(
                "the gateway process that received a slash command is gone; its answer is "
                "dropped, not posted in public",
                extra=where,
            )
        return True

    async def _read_forwarded(self) -> None:
        """Resolve the commands waiting here with the answers other processes forwarded."""
        pending = self.pending
        if pending is None:
            return
        pause = 0.0  # after a store error: the wait before the next read (0: none failed)
        try:
            while True:
                try:
                    payload = await pending.receive(INBOX_WAIT)
                except Exception:
                    if not pause:  # once per outage; the store's outage is logged elsewhere too
                        log.warning("could not read forwarded slash command answers", exc_info=True)
                    pause = min(RETRY_AFTER[1], max(RETRY_AFTER[0], pause * 2))
                    await asyncio.sleep(pause)
                    continue
                pause = 0.0
                if payload is not None:
                    self._resolve(payload)
        finally:
            try:
                await asyncio.shield(pending.leave())
            except Exception:  # the liveness mark lapses by itself
                log.debug("could not clear the liveness mark", exc_info=True)

    def _resolve(self, payload: str) -> None:
        try:
            reply = Reply.model_validate_json(payload)
        except ValidationError:
            log.warning("a forwarded slash command answer does not fit Reply; dropped")
            return
        waiting = self._interactions.get(reply.reply_to_id or "")
        if waiting is None or waiting.done():
            log.info(
                "a forwarded slash command answer came after its follow-up; dropped",
                extra={"reply_to_id": reply.reply_to_id},
            )
        else:
            waiting.set_result(reply)
