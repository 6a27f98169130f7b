"""The engagement policy's vocabulary: its thresholds, its decisions and the per-channel ledger.

Why apart from the policy (``bot/engagement/policy.py``): these are the types every user of the
policy shares -- the router reads a ``Decision``, ``turns`` renders a ``Batch``, the replay and
the benchmark build ``PolicyConfig``s and look into ``ChannelState`` -- while the rules that
mutate the ledger are one module of functions. Keeping the data here keeps each file about one
thing and the policy's hot path free of declarations. ``Engagement`` (a process's channel
states, each with its resolved config) is data too, and lives here for the same reason.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, model_validator

from bot.events import ChatMessage, ConversationKey

NEVER = -math.inf


class PolicyConfig(BaseModel):
    """Every threshold of the policy. One default, overridable per platform or per channel."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # A chatter batch needs this many unanswered messages and this long since the bot spoke.
    min_pending: int = Field(default=8, ge=1)
    min_gap_seconds: float = Field(default=45.0, ge=0)
    # Chatters named in one batched message.
    max_batch_chatters: int = Field(default=2, ge=1, le=10)
    # Mentioners named in one message when mentions wait for a costly platform's reply budget.
    max_mention_batch: int = Field(default=5, ge=1, le=20)
    # Since the bot last spoke, before an unprompted message (chatter batch, idle line).
    channel_cooldown_seconds: float = Field(default=5.0, ge=0)
    # Between two answers to one user (spam protection). Mentions draw on a small burst
    # instead: up to ``mention_burst`` answers at once, one more per cooldown after that, so a
    # regular who asks twice in a row is answered at once while a mention spammer gets one
    # answer per cooldown; a mention over the burst is queued until the next one is earned.
    user_cooldown_seconds: float = Field(default=10.0, ge=0)
    mention_burst: int = Field(default=3, ge=1, le=20)
    # Unaddressed spam: same user + same normalised text within the window; more than
    # flood_max_messages from one user within flood_window_seconds; over wall_max_chars.
    repeat_window_seconds: float = Field(default=60.0, ge=0)
    flood_max_messages: int = Field(default=6, ge=1)
    flood_window_seconds: float = Field(default=15.0, gt=0)
    wall_max_chars: int = Field(default=400, ge=20)
    # Pending messages older than this are dropped, never answered.
    stale_after_seconds: float = Field(default=180.0, gt=0)
    # A chatter waiting this long ranks with the questions, so nobody starves.
    promote_after_seconds: float = Field(default=90.0, ge=0)
    # Ledger bounds: chatters (oldest dropped), newest messages kept per chatter, users tracked
    # for cooldowns and flood (least recently active forgotten).
    max_pending_chatters: int = Field(default=64, ge=1)
    max_pending_per_chatter: int = Field(default=3, ge=1)
    max_tracked_users: int = Field(default=5000, ge=1)
    # Other unanswered lines handed to the model with a batch, for context.
    context_messages: int = Field(default=6, ge=0)
    # Quiet seconds before one self-prompted line; None = never.
    idle_prompt_after_seconds: float | None = Field(default=None, gt=0)
    # "<prefix> pause" / "<prefix> resume", from the channel owner or a moderator.
    command_prefix: str = Field(default="!chorus", min_length=1)

    @model_validator(mode="after")
    def _consistent(self) -> PolicyConfig:
        if self.stale_after_seconds <= self.user_cooldown_seconds:
            raise ValueError(
                "stale_after_seconds must exceed user_cooldown_seconds, or a mention "
                "queued behind the cooldown would go stale before it is answered"
            )
        return self


class Action(StrEnum):
    ANSWER_NOW = "answer_now"
    QUEUE = "queue"
    IGNORE = "ignore"
    COMMAND = "command"


class Reason(StrEnum):
    ADDRESSED = "addressed"
    USER_COOLDOWN = "user_cooldown"  # addressed, but the user was answered moments ago: queued
    QUESTION = "question"
    CHATTER = "chatter"
    PAUSE = "pause"
    RESUME = "resume"
    PAUSED = "paused"
    NOT_PERMITTED = "command_not_permitted"
    UNKNOWN_COMMAND = "unknown_command"
    DUPLICATE = "duplicate"
    BOT_AUTHOR = "bot_author"
    EMPTY = "empty"
    WALL = "wall_of_text"
    FLOOD = "flood"
    REPEAT = "repeat"
    BUDGET = "budget"  # addressed, but the reply budget's pace is closed: queued, answered together
    BOT_COMMAND = "bot_command"  # "!socials": a chat-bot command (custom commands answer it)


@dataclass(frozen=True, slots=True)
class PendingMessage:
    """One unanswered message in the ledger."""

    message: ChatMessage
    at: float
    question: bool
    addressed: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    reason: Reason
    covered: tuple[PendingMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchChatter:
    user_id: str
    user_name: str
    messages: tuple[PendingMessage, ...]


@dataclass(frozen=True, slots=True)
class Batch:
    """Chatters to answer together in one message; ``context`` is other recent, unanswered chat
    (shown to the model for colour, not marked answered)."""

    reason: Reason  # ADDRESSED: a mention queued behind a cooldown; CHATTER: thresholds met
    chatters: tuple[BatchChatter, ...]
    context: tuple[PendingMessage, ...] = ()

    @property
    def message_ids(self) -> tuple[str, ...]:
        return tuple(p.message.id for c in self.chatters for p in c.messages)

    @property
    def user_ids(self) -> tuple[str, ...]:
        return tuple(c.user_id for c in self.chatters)


@dataclass(frozen=True, slots=True)
class DeclinedMention:
    """A mention the ledger let go unanswered, and why: ``superseded`` (a newer mention of the
    same user took its place), ``stale``, ``overflow`` (ledger full of waiting mentions) or
    ``paused``. The caller logs and counts each one (``take_declined``)."""

    message: ChatMessage
    reason: str


@dataclass(slots=True)
class TrackedUser:
    last_answered: float = NEVER
    # The mention burst as a token bucket: ``credit`` answers were left at ``credit_at``; it
    # refills by one per ``user_cooldown_seconds`` up to ``mention_burst`` (full when unset).
    credit: float = math.inf
    credit_at: float = NEVER
    times: deque[float] = field(default_factory=deque)  # maxlen set on creation
    recent: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=4))


@dataclass(slots=True)
class PendingChatter:
    """A user's pending messages (newest ``max_pending_per_chatter`` kept).

    ``since`` is when the user started waiting: it stays put while newer messages supersede
    older ones, so a steady chatter's wait keeps growing until they are answered.
    """

    messages: deque[PendingMessage]
    since: float
    addressed: int = 0
    questions: int = 0


@dataclass(slots=True)
class ChannelState:
    """The mutable ledger of one conversation. Create with ``ChannelState(config)``."""

    config: PolicyConfig
    paused: bool = False
    last_seen: float | None = None  # the latest message of any kind (bot/engagement/durable.py)
    last_spoke: float = NEVER
    last_activity: float | None = None
    idle_fired: bool = False
    pending: OrderedDict[str, PendingChatter] = field(default_factory=OrderedDict)
    pending_messages: int = 0
    addressed_pending: int = 0
    addressed_ready_at: float = math.inf
    users: OrderedDict[str, TrackedUser] = field(default_factory=OrderedDict)
    seen: set[str] = field(default_factory=set)
    seen_order: deque[str] = field(default_factory=deque)
    dropped: Counter[str] = field(default_factory=Counter)  # stale|overflow|superseded|paused|flood
    # Mentions let go unanswered, until the caller takes them (bounded if nobody does).
    declined: deque[DeclinedMention] = field(default_factory=lambda: deque(maxlen=1024))


class Engagement:
    """The channel states of one process, each with its resolved ``PolicyConfig``.

    ``overrides`` maps ``str(conversation_key)`` (``"twitch:somechannel"``) or a platform name
    (``"youtube"``) to a config; the most specific match wins, else ``default``.
    """

    def __init__(
        self,
        default: PolicyConfig | None = None,
        overrides: Mapping[str, PolicyConfig] | None = None,
    ) -> None:
        self.default = default or PolicyConfig()
        self.overrides = dict(overrides or {})
        self.states: dict[ConversationKey, ChannelState] = {}

    def config_for(self, key: ConversationKey) -> PolicyConfig:
        found = self.overrides.get(str(key)) or self.overrides.get(key.platform)
        return found or self.default

    def state(self, key: ConversationKey) -> ChannelState:
        state = self.states.get(key)
        if state is None:
            state = self.states[key] = ChannelState(self.config_for(key))
        return state
