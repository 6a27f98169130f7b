"""A streamed answer on Slack (``bot.platform.streaming.DraftView``).

Slack's streaming methods first: ``chat.startStream`` opens the answer's message in its thread
with the first text, ``chat.appendStream`` adds what the model wrote since, ``chat.stopStream``
ends it. They take standard Markdown (``markdown_text``), so a draft is sent as the model wrote
it with every ``&``, ``<`` and ``>`` escaped as entities and ``@here``/``@channel``/``@everyone``
broken by a zero-width space: no control sequence and no ping can come out of a draft. Outside
a DM Slack wants the recipient (``recipient_user_id``, ``recipient_team_id``). A stream can only
grow: when the draft starts over (the model called a tool, or another worker took the turn
over) the stream is stopped and the message is edited from then on.

Where the streaming methods are not available (no thread to stream into, a top-level DM; the
app lacks the feature: ``unknown_method``, ``not_allowed_token_type``...; or
``SLACK_NATIVE_STREAMING=false``), the first draft is posted (``chat.postMessage``) and then
edited (``chat.update``), split at Slack's message length like the final answer.

While a tool runs the thread shows the assistant status ("is fetching a page…",
``assistant.threads.setStatus``), cleared when text follows. The final answer is exactly what an
unstreamed reply posts (``convert.reply_to_posts``: mrkdwn, mention-safe, split): the stream
is stopped, the message updated to the first piece, the rest posted, surplus drafts deleted.

A gateway restarted mid-stream gets the answer's message back from ``LiveAnswers`` (``state``:
the messages' ts and whether a stream is open; ``resume``): an open stream cannot be appended to
by a process that does not know what it shows, so it is stopped and the message edited from
then on, and the final answer lands in it like any other.

Every call goes through ``SlackSender`` (``stream_call``: per-method windows; ``post_message``:
the channel's one-a-second slot); ``pace`` keeps drafts to their share of each window.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import prompts
from adapters.slack.convert import MESSAGE_LIMIT, PostArgs, reply_to_posts
from adapters.slack.mrkdwn import ZWSP, to_mrkdwn
from adapters.slack.sender import SlackSender, SlackSendError
from bot.events import Reply, ReplyDraft
from bot.platform.textsplit import split_text

log = logging.getLogger("chorus.slack.live")

MARKDOWN_LIMIT = 11_000  # a streaming call takes 12,000 characters; past this, edit instead
# Errors that say the streaming methods are not for this app or workspace: stop trying them.
UNAVAILABLE = frozenset(
    {
        "unknown_method",
        "not_allowed_token_type",
        "missing_scope",
        "feature_not_enabled",
        "method_deprecated",
        "missing_recipient_user_id",
        "missing_recipient_team_id",
        "not_supported",
    }
)
_BROADCAST = re.compile(r"(?i)(?<![\w])@(here|channel|everyone)\b")


def markdown_safe(text: str) -> str:
    """Model Markdown for ``markdown_text``: no control sequence, no broadcast ping."""
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return _BROADCAST.sub(lambda m: f"@{ZWSP}{m.group(1)}", text)


def status_text(activity: str) -> str:
    """The thread's assistant status while ``activity`` runs ("is fetching a page…")."""
    return prompts.render("slack/status", activity=activity)


@dataclass
class NativeStreams:
    """Whether the streaming methods are worth trying (once refused, never again)."""

    enabled: bool = True


class SlackLive:
    """One answer's message(s) in one conversation."""

    def __init__(
        self,
        sender: SlackSender,
        draft: ReplyDraft,
        *,
        native: NativeStreams,
        team_id: str | None,
        on_posted: Callable[[str, str], None] = lambda channel, ts: None,
    ) -> None:
        self.sender = sender
        self.native = native
        self.channel = draft.conversation.channel
        self.thread = draft.conversation.thread
        self.users = draft.addressed_user_ids
        self.team_id = team_id
        self.on_posted = on_posted
        self.ts: list[str] = []  # the answer's messages
        self.texts: list[str] = []
        self.streamed: str | None = None  # the Markdown streamed so far, while streaming
        self.reopened = False  # a stream a previous process opened (resumed): stop it first
        self.status = False

    async def pace(self) -> None:
        await self.sender.pace("chat.appendStream" if self.streamed else "chat.update")

    def state(self) -> dict[str, Any] | None:
        if not self.ts:
            return None
        return {"ts": list(self.ts), "streaming": self.streamed is not None or self.reopened}

    def resume(self, state: Mapping[str, Any]) -> None:
        self.ts = [str(ts) for ts in state.get("ts") or ()]
        self.texts = [""] * len(self.ts)  # unknown: every piece is updated
        self.reopened = bool(state.get("streaming")) and bool(self.ts)

    async def discard(self) -> None:
        for ts in self.ts:
            with contextlib.suppress(SlackSendError):  # gone already
                await self._call("chat.delete", ts=ts)
        self.ts.clear()
        self.texts.clear()

    async def show(self, draft: ReplyDraft) -> None:
        await self._status(draft.status)
        text = draft.text.strip()
        if not text:
            return
        if self.reopened:
            await self._stop()
        markdown = markdown_safe(text)
        if self.streamed is not None:
            if markdown.startswith(self.streamed) and len(markdown) <= MARKDOWN_LIMIT:
                delta = markdown[len(self.streamed) :]
                if delta:
                    await self._call("chat.appendStream", ts=self.ts[0], markdown_text=delta)
                    self.streamed = markdown
                return
            await self._stop()  # it cannot shrink: edit from here on
        elif not self.ts and await self._start(markdown):
            return
        pieces = split_text(to_mrkdwn(text, self.users), MESSAGE_LIMIT)
        for index, piece in enumerate(pieces):
            await self._put(index, piece)

    async def finish(self, reply: Reply) -> None:
        posts = reply_to_posts(reply)
        if self.streamed is not None or self.reopened:
            await self._stop()
        await self._status(None)
        for index, post in enumerate(posts):
            await self._put(index, post.text)
        for ts in self.ts[len(posts) :]:
            await self._call("chat.delete", ts=ts)
        del self.ts[len(posts) :]

    async def _start(self, markdown: str) -> bool:
        """Open a stream with the first text; False when streaming is not to be had."""
        if not (self.native.enabled and self.thread and len(markdown) <= MARKDOWN_LIMIT):
            return False
        recipient = {}
        if not self.channel.startswith("D") and self.users and self.team_id:
            recipient = {"recipient_user_id": self.users[0], "recipient_team_id": self.team_id}
        try:
            response = await self.sender.stream_call(
                "chat.startStream",
                channel=self.channel,
                thread_ts=self.thread,
                markdown_text=markdown,
                **recipient,
            )
        except SlackSendError as exc:
            if exc.error not in UNAVAILABLE:
                raise
            self.native.enabled = False
            log.warning(
                "slack refused chat.startStream; streaming by chat.update instead",
                extra={"error": exc.error},
            )
            return False
        self.ts, self.texts, self.streamed = [str(response["ts"])], [""], markdown
        self.on_posted(self.channel, self.thread)
        return True

    async def _stop(self) -> None:
        self.streamed, self.reopened = None, False
        try:
            await self._call("chat.stopStream", ts=self.ts[0])
        except SlackSendError as exc:
            if exc.error != "message_not_in_streaming_state":
                raise

    async def _put(self, index: int, text: str) -> None:
        """Message ``index`` shows ``text`` (mrkdwn): updated, or posted if there is none."""
        if index < len(self.ts):
            if self.texts[index] != text:
                await self._call("chat.update", ts=self.ts[index], text=text, link_names=False)
                self.texts[index] = text
            return
        response = await self.sender.post_message(PostArgs(self.channel, text, self.thread))
        self.ts.append(str(response["ts"]))
        self.texts.append(text)
        if self.thread:
            self.on_posted(self.channel, self.thread)

    async def _status(self, activity: str | None) -> None:
        """Show what runs (the assistant status of the thread), or clear it."""
        if not self.thread or (activity is None and not self.status):
            return
        status = status_text(activity) if activity else ""
        try:
            await self.sender.stream_call(
                "assistant.threads.setStatus",
                channel_id=self.channel,
                thread_ts=self.thread,
                status=status,
            )
        except SlackSendError as exc:  # progress is a nicety: never fail the answer for it
            log.info("could not set the slack status", extra={"error": exc.error})
            return
        self.status = bool(status)

    async def _call(self, method: str, **kwargs: object) -> None:
        await self.sender.stream_call(method, channel=self.channel, **kwargs)
