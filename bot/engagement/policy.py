"""The engagement policy: when the bot speaks in a busy live chat, and to whom.

A Twitch or YouTube chat can run at dozens of messages a second; answering each one would flood
the chat, burn the platform's send budget and the model budget, and read as spam. So the policy
answers what is addressed to the bot at once (a mention, a reply to it, a DM), lets ordinary
chatter accumulate in a per-channel *ledger*, and now and then speaks once to up to two chatters
by name - questions first, then whoever was answered least recently or waited longest - the way a
streamer glances at chat (after the "when to speak" rules of a streaming agent: mentions at once,
accumulated chatter after N unanswered messages and T seconds since the bot last spoke).

Everything here is pure and synchronous: no I/O, no asyncio, no clock. Time is passed in as
``now``, float seconds on any monotonic scale (``time.monotonic()`` in the router, simulated
seconds in ``bot/engagement/replay.py``), so the rules are table-tested and a long trace replays in
milliseconds. ``ChannelState`` is mutable on purpose: the ingest budget (>= 20,000 msg/s per
process) rules out copying state per message, so ``observe`` mutates it in O(1) (dict lookups,
bounded deques, an LRU of users) and never walks the ledger; only ``due`` walks it, the ledger
is capped at ``max_pending_chatters`` entries, and ``due`` returns early unless a batch is likely.

Call protocol (one ``ChannelState`` per conversation; ``Engagement`` keeps them):

- ``observe(state, message, now)`` per inbound message -> ``Decision``: ANSWER_NOW (run a turn
  for this message now; ``decision.covered`` are the same user's queued messages it answers too),
  QUEUE (kept in the ledger), IGNORE (with a reason) or COMMAND (pause/resume applied; ack it).
- ``due(state, now, room=...)`` from a timer, about once a second per channel -> a ``Batch`` of
  at most ``max_batch_chatters`` chatters to answer in one message, already marked answered
  (``room=False`` while a costly platform's reply budget holds room batches back).
- ``idle_due(state, now)`` from the same timer -> True at most once per quiet period.
- ``mark_spoke(state, now)`` after every message the bot sends in the channel.

Rules in brief: addressed messages skip the spam filters; only the per-user mention burst
applies (up to ``mention_burst`` answers at once, then one per ``user_cooldown_seconds``: a
mention over it is queued and answered as soon as the next answer is earned); ``!chorus pause``
from the owner or a moderator silences the channel completely and empties its ledger until
``!chorus resume`` (from anyone else both are ignored); repeats, floods and walls of text are
ignored with a reason, and a flooder's queued *ambient* lines are dropped; an ambient chat-bot
command (``!socials``) is ignored too: the custom commands answer it, the model never.

Mentions are never dropped by flood control: the flood, repeat and wall filters judge ambient
lines only, a flood drops only the flooder's ambient lines, and in a chatter's slots of the
ledger an ambient line always gives way before a mention. A busy regular who mentions the bot
inside their cooldown and then floods the chat is still answered, once, when the cooldown ends
(one reply to all their waiting mentions, threaded to the latest). A waiting mention leaves the
ledger unanswered only for a reason - ``superseded`` by a newer mention of the same user when
all their slots hold mentions (the latest mention wins), ``stale``, ``overflow`` (every chatter
in a full ledger has a mention waiting) or ``paused`` - and each such mention is kept in
``state.declined`` until the caller takes it (``take_declined``) to log and count it.

This module is the rules only. Their vocabulary (``PolicyConfig``, ``Decision``, ``Batch``, the
``ChannelState`` ledger) is ``bot.engagement.ledger`` and the platforms' send budgets are
``bot.engagement.send_limits``; both are re-exported here, so a caller imports the policy from one
place.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Iterator

from bot.engagement.cooldowns import (
    answered_at,
    charge,
    mention_ready_at,
    note_answered,
    ready_at,
    touch_user,
)
from bot.engagement.ledger import (
    Action,
    Batch,
    BatchChatter,
    ChannelState,
    Decision,
    DeclinedMention,
    Engagement,
    PendingChatter,
    PendingMessage,
    PolicyConfig,
    Reason,
)
from bot.engagement.send_limits import SEND_LIMITS, SendLimit, send_limit
from bot.events import ChatMessage

__all__ = [
    "SEEN_CAP",
    "SEND_LIMITS",
    "Action",
    "Batch",
    "BatchChatter",
    "ChannelState",
    "Decision",
    "DeclinedMention",
    "Engagement",
    "PendingMessage",
    "PolicyConfig",
    "Reason",
    "SendLimit",
    "apply_pause",
    "due",
    "idle_due",
    "is_question",
    "is_wall",
    "mark_spoke",
    "note_answered",
    "observe",
    "room_ready",
    "take_declined",
    "send_limit",
    "touch_user",
]

SEEN_CAP = 4096
_QUESTION_WORDS = frozenset(
    ("what", "why", "how", "when", "where", "who", "whom", "whose", "which", "can", "could")
    + ("would", "should", "will", "shall", "is", "are", "am", "do", "does", "did", "anyone")
)
_PUNCT = str.maketrans("", "", "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def is_question(text: str) -> bool:
    """A ``?`` anywhere, or a question word first ("how do I...", "anyone know...")."""
    if "?" in text:
        return True
    first = text.lstrip()[:12].split(maxsplit=1)
    return bool(first) and first[0].lower().strip(",.!:") in _QUESTION_WORDS


def is_wall(text: str, max_chars: int) -> bool:
    """Over ``max_chars``, or mostly one repeated character or one repeated word (emote spam)."""
    if len(text) > max_chars:
        return True
    squeezed = "".join(text.split())
    if len(squeezed) >= 16 and max(map(squeezed.count, set(squeezed))) >= 0.6 * len(squeezed):
        return True
    words = text.split()
    return len(words) >= 6 and len(set(words)) * 3 <= len(words)


def is_bot_command(text: str) -> bool:
    """``!socials``, ``!so @friend``: a line for a chat bot's command, never a batch's."""
    head = text.lstrip()
    return len(head) > 1 and head[0] == "!" and head[1].isalnum()


def _normalised_hash(text: str) -> int:
    return hash(" ".join(text.casefold().translate(_PUNCT).split()))


def _parse_command(text: str, prefix: str) -> str | None:
    head = text.lstrip()
    if not head.startswith(prefix[0]):
        return None
    parts = head.lower().split()
    if len(parts) < 2 or parts[0] != prefix.lower():
        return None
    return parts[1]


_DECISIONS = {reason: Decision(Action.IGNORE, reason) for reason in Reason}
_DECISIONS[Reason.PAUSE] = Decision(Action.COMMAND, Reason.PAUSE)
_DECISIONS[Reason.RESUME] = Decision(Action.COMMAND, Reason.RESUME)
_DECISIONS[Reason.ADDRESSED] = Decision(Action.ANSWER_NOW, Reason.ADDRESSED)
for _r in (Reason.USER_COOLDOWN, Reason.BUDGET, Reason.QUESTION, Reason.CHATTER):
    _DECISIONS[_r] = Decision(Action.QUEUE, _r)


def observe(
    state: ChannelState, message: ChatMessage, now: float, *, hold_mentions: bool = False
) -> Decision:
    """Classify one inbound message and update the ledger. O(1): never walks the ledger.

    ``hold_mentions``: a costly platform's reply budget cannot pay for a reply of its own now,
    so a mention is queued (``BUDGET``) and answered with the others waiting by ``due`` once
    the budget lets mentions go again."""
    cfg = state.config
    if message.id in state.seen:
        return _DECISIONS[Reason.DUPLICATE]
    state.seen.add(message.id)
    state.seen_order.append(message.id)
    if len(state.seen_order) > SEEN_CAP:
        state.seen.discard(state.seen_order.popleft())
    author = message.author
    if author.is_bot:
        return _DECISIONS[Reason.BOT_AUTHOR]
    text = message.text
    command = _parse_command(text, cfg.command_prefix)
    if command is not None:
        return _command(state, command, author.is_moderator, now)
    if state.paused:
        return _DECISIONS[Reason.PAUSED]
    state.last_activity = now
    state.idle_fired = False
    user = touch_user(state, author.id)
    flooding = (
        len(user.times) == user.times.maxlen and now - user.times[0] < cfg.flood_window_seconds
    )
    user.times.append(now)
    if message.addressed:
        ready = mention_ready_at(user, now, cfg)
        if ready > now:
            _enqueue(state, message, now, question=is_question(text), addressed=True)
            state.addressed_ready_at = min(state.addressed_ready_at, ready)
            return _DECISIONS[Reason.USER_COOLDOWN]
        if hold_mentions:
            _enqueue(state, message, now, question=is_question(text), addressed=True)
            state.addressed_ready_at = min(state.addressed_ready_at, now)
            return _DECISIONS[Reason.BUDGET]
        charge(user, now, cfg)
        state.last_spoke = max(state.last_spoke, now)  # reserved until mark_spoke at send time
        covered = _pop_chatter(state, author.id)
        if covered:
            return Decision(Action.ANSWER_NOW, Reason.ADDRESSED, covered)
        return _DECISIONS[Reason.ADDRESSED]
    if not text.strip():
        return _DECISIONS[Reason.EMPTY]
    if is_bot_command(text):  # for a command bot (Chorus's custom commands), not a chat line
        return _DECISIONS[Reason.BOT_COMMAND]
    if is_wall(text, cfg.wall_max_chars):
        return _DECISIONS[Reason.WALL]
    if flooding:  # a flooder's queued ambient lines go too; a waiting mention stays
        state.dropped["flood"] += _drop_ambient(state, author.id)
        return _DECISIONS[Reason.FLOOD]
    digest = _normalised_hash(text)
    for seen_digest, at in user.recent:
        if seen_digest == digest and now - at < cfg.repeat_window_seconds:
            return _DECISIONS[Reason.REPEAT]
    user.recent.append((digest, now))
    question = is_question(text)
    _enqueue(state, message, now, question=question, addressed=False)
    return _DECISIONS[Reason.QUESTION if question else Reason.CHATTER]


def due(
    state: ChannelState, now: float, *, room: bool = True, mentions: bool = True
) -> Batch | None:
    """The chatters to answer now, in one message, or None. Marks them answered.

    A batch is due when a mention queued behind its user's cooldown is ready (a deferred
    mention, so like any mention it ignores the channel cooldown), or when at least
    ``min_pending`` messages are unanswered and both ``min_gap_seconds`` and
    ``channel_cooldown_seconds`` have passed since the bot last spoke (a *room batch*; with
    ``room=False``, when the reply budget cannot pay for one now, only deferred mentions are
    due). O(1) when nothing can be due.

    With ``mentions=False`` (the reply budget's pace is closed) waiting mentions stay queued.
    A batch of waiting mentions names up to ``max_mention_batch`` mentioners, ranked by the
    policy (who was answered least recently, then who waited longest); questions join only up to
    ``max_batch_chatters`` chatters in all.
    """
    cfg = state.config
    if state.paused or not state.pending:
        return None
    addressed_ready = state.addressed_pending > 0 and now >= state.addressed_ready_at
    if addressed_ready and not mentions:
        _prune(state, now)  # mentions waiting for the budget still go stale, with a reason
        addressed_ready = False
    if not addressed_ready and not (room and room_ready(state, now)):
        return None
    _prune(state, now)
    threshold = room and room_ready(state, now)
    ranked = sorted(
        (
            (_tier(chatter, now, cfg), answered_at(state, uid), chatter.since, uid)
            for uid, chatter in state.pending.items()
            if ready_at(state, uid, chatter, now) <= now
        ),
    )
    if not mentions:
        ranked = [r for r in ranked if r[0] != 0]
    if not ranked or (not threshold and ranked[0][0] != 0):
        return None
    if threshold:
        chosen = [r[3] for r in ranked][: cfg.max_batch_chatters]
    else:  # waiting mentions (several at once), then questions up to the usual batch size
        chosen = [r[3] for r in ranked if r[0] == 0][: cfg.max_mention_batch]
        asking = [r[3] for r in ranked if r[0] == 1]
        chosen += asking[: max(0, cfg.max_batch_chatters - len(chosen))]
    chatters = tuple(_answer(state, uid, now) for uid in chosen)
    state.last_spoke = max(state.last_spoke, now)
    context = tuple(_recent_context(state, cfg.context_messages))
    return Batch(Reason.CHATTER if threshold else Reason.ADDRESSED, chatters, context)


def room_ready(state: ChannelState, now: float) -> bool:
    """Whether the chatter thresholds for a room batch are met (``due`` would give one)."""
    cfg, quiet = state.config, now - state.last_spoke
    enough = state.pending_messages >= cfg.min_pending and not state.paused
    return enough and quiet >= max(cfg.min_gap_seconds, cfg.channel_cooldown_seconds)


def idle_due(state: ChannelState, now: float) -> bool:
    """True once per quiet period: no user message and no bot message for the idle delay.

    Off unless ``idle_prompt_after_seconds`` is set; never while paused; never in a channel
    where nobody has spoken yet. Only a user's message starts a new quiet period, so the bot
    never talks to itself in an empty channel.
    """
    after = state.config.idle_prompt_after_seconds
    if after is None or state.paused or state.idle_fired or state.last_activity is None:
        return False
    quiet = now - max(state.last_activity, state.last_spoke)
    if quiet < after or now - state.last_spoke < state.config.channel_cooldown_seconds:
        return False
    state.idle_fired = True
    state.last_spoke = max(state.last_spoke, now)
    return True


def take_declined(state: ChannelState) -> list[DeclinedMention]:
    """The mentions the ledger let go unanswered since the last call (oldest first)."""
    declined = list(state.declined)
    state.declined.clear()
    return declined


def mark_spoke(state: ChannelState, now: float) -> None:
    """Record that the bot sent a message in this channel (starts the gap and the cooldown)."""
    state.last_spoke = max(state.last_spoke, now)


def _command(state: ChannelState, command: str, allowed: bool, now: float) -> Decision:
    if command not in ("pause", "resume"):
        return _DECISIONS[Reason.UNKNOWN_COMMAND]
    if not allowed:
        return _DECISIONS[Reason.NOT_PERMITTED]
    apply_pause(state, command == "pause", now)
    return _DECISIONS[Reason.PAUSE if state.paused else Reason.RESUME]


def apply_pause(state: ChannelState, paused: bool, now: float) -> None:
    """Pause (empty the ledger, its waiting mentions declined ``paused``) or resume a channel:
    a ``!chorus`` command here, or the durable state another process left (bot/engagement/durable.py)."""
    if paused:
        state.paused = True
        state.dropped["paused"] += state.pending_messages
        for chatter in state.pending.values():
            _decline(state, (p for p in chatter.messages if p.addressed), "paused")
        _clear(state)
        return
    state.paused = False
    state.last_activity = None if state.last_activity is None else max(state.last_activity, now)


def _enqueue(
    state: ChannelState, message: ChatMessage, now: float, *, question: bool, addressed: bool
) -> None:
    cfg = state.config
    item = PendingMessage(message, now, question, addressed)
    chatter = state.pending.get(message.author.id)
    if chatter is None:
        if len(state.pending) >= cfg.max_pending_chatters:
            _evict_chatter(state)
        chatter = PendingChatter(deque(maxlen=cfg.max_pending_per_chatter), now)
        state.pending[message.author.id] = chatter
    if len(chatter.messages) == chatter.messages.maxlen:
        # The oldest ambient line gives way; a mention only to a newer mention (latest wins).
        slot = next((i for i, p in enumerate(chatter.messages) if not p.addressed), None)
        if slot is None and not addressed:
            state.dropped["superseded"] += 1  # every slot holds a mention: the line goes
            return
        gone = chatter.messages[slot or 0]
        del chatter.messages[slot or 0]
        _discount(state, chatter, gone)
        state.dropped["superseded"] += 1
        if gone.addressed:
            _decline(state, (gone,), "superseded")
    chatter.messages.append(item)
    chatter.addressed += addressed
    chatter.questions += question
    state.pending_messages += 1
    state.addressed_pending += addressed


def _evict_chatter(state: ChannelState) -> None:
    """Make room in a full ledger: the longest-waiting chatter without a waiting mention goes
    (scans the capped ledger, only on overflow); if every chatter has one, the oldest goes."""
    uid = next((u for u, c in state.pending.items() if not c.addressed), None)
    if uid is None:
        uid = next(iter(state.pending))
    oldest = state.pending.pop(uid)
    _forget(state, oldest)
    state.dropped["overflow"] += len(oldest.messages)
    _decline(state, (p for p in oldest.messages if p.addressed), "overflow")


def _drop_ambient(state: ChannelState, user_id: str) -> int:
    """Drop ``user_id``'s queued ambient lines, keeping any waiting mention; how many went."""
    chatter = state.pending.get(user_id)
    if chatter is None:
        return 0
    if not chatter.addressed:
        return len(_pop_chatter(state, user_id))
    ambient = [p for p in chatter.messages if not p.addressed]
    for item in ambient:
        chatter.messages.remove(item)
        _discount(state, chatter, item)
    return len(ambient)


def _decline(state: ChannelState, items: Iterable[PendingMessage], reason: str) -> None:
    for item in items:
        state.declined.append(DeclinedMention(item.message, reason))


def _discount(state: ChannelState, chatter: PendingChatter, item: PendingMessage) -> None:
    chatter.addressed -= item.addressed
    chatter.questions -= item.question
    state.pending_messages -= 1
    state.addressed_pending -= item.addressed


def _forget(state: ChannelState, chatter: PendingChatter) -> None:
    state.pending_messages -= len(chatter.messages)
    state.addressed_pending -= chatter.addressed


def _pop_chatter(state: ChannelState, user_id: str) -> tuple[PendingMessage, ...]:
    chatter = state.pending.pop(user_id, None)
    if chatter is None:
        return ()
    _forget(state, chatter)
    return tuple(chatter.messages)


def _clear(state: ChannelState) -> None:
    state.pending.clear()
    state.pending_messages = state.addressed_pending = 0
    state.addressed_ready_at = math.inf


def _prune(state: ChannelState, now: float) -> None:
    """Drop stale messages and recompute the addressed-ready time (walks the capped ledger)."""
    cfg = state.config
    horizon = now - cfg.stale_after_seconds
    ready = math.inf
    for uid in list(state.pending):
        chatter = state.pending[uid]
        while chatter.messages and chatter.messages[0].at < horizon:
            gone = chatter.messages.popleft()
            _discount(state, chatter, gone)
            state.dropped["stale"] += 1
            if gone.addressed:
                _decline(state, (gone,), "stale")
        if not chatter.messages:
            del state.pending[uid]
            continue
        if chatter.addressed:
            ready = min(ready, ready_at(state, uid, chatter, now))
    state.addressed_ready_at = ready


def _tier(chatter: PendingChatter, now: float, cfg: PolicyConfig) -> int:
    if chatter.addressed:
        return 0
    if chatter.questions or now - chatter.since >= cfg.promote_after_seconds:
        return 1
    return 2


def _answer(state: ChannelState, user_id: str, now: float) -> BatchChatter:
    messages = _pop_chatter(state, user_id)
    charge(touch_user(state, user_id), now, state.config)
    author = messages[-1].message.author
    return BatchChatter(user_id, author.display_name or user_id, messages)


def _recent_context(state: ChannelState, limit: int) -> Iterator[PendingMessage]:
    if limit <= 0:
        return
    newest = sorted((p for c in state.pending.values() for p in c.messages), key=lambda p: p.at)
    yield from newest[-limit:]
