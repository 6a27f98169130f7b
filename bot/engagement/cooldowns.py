"""Per-user answer limits of the engagement policy: the plain cooldown and the mention burst.

Why a burst for mentions: a single cooldown between two answers to one person made a busy
regular's second question wait up to the whole cooldown (10 s), which is what dominated the time
to answer in busy traces. A token bucket keeps the long-run limit (one answer per cooldown) but
lets a person be answered ``mention_burst`` times in a row; one mention spammer still cannot
make the bot answer more than that. Room batches keep the plain cooldown
(``last_answered + user_cooldown_seconds``). Also here: the LRU of tracked users. Pure
functions over the ledger's data; time is passed in.

Why the tracked users are a hand-rolled LRU (``ChannelState.users``, an ``OrderedDict``) and not
a ``cachetools.LRUCache``: the bound is the channel's ``max_tracked_users``, which follows a
reload (the channel's config is replaced), while a cachetools cache's ``maxsize`` is fixed when
it is made; and only a user's own activity (``touch_user``) refreshes them, while the policy's
reads (``answered_at``, ``ready_at``) must not, and every ``LRUCache`` lookup does.
"""

from __future__ import annotations

from collections import deque

from bot.engagement.ledger import NEVER, ChannelState, PendingChatter, PolicyConfig, TrackedUser

# A mention is ready when its user's credit reaches one answer, give or take float rounding.
_CREDIT_EPSILON = 1e-9


def credit(user: TrackedUser, now: float, cfg: PolicyConfig) -> float:
    """The answers ``user`` may be given at once at ``now`` (the mention burst's bucket)."""
    burst = float(cfg.mention_burst)
    if user.credit >= burst or cfg.user_cooldown_seconds <= 0:
        return burst
    return min(burst, user.credit + (now - user.credit_at) / cfg.user_cooldown_seconds)


def mention_ready_at(user: TrackedUser, now: float, cfg: PolicyConfig) -> float:
    left = credit(user, now, cfg)
    if left >= 1.0 - _CREDIT_EPSILON:
        return now
    return now + (1.0 - left) * cfg.user_cooldown_seconds


def charge(user: TrackedUser, now: float, cfg: PolicyConfig) -> None:
    """``user`` is answered at ``now``: one answer off the burst, and the cooldown restarts."""
    user.credit = max(0.0, credit(user, now, cfg) - 1.0)
    user.credit_at = now
    user.last_answered = max(user.last_answered, now)


def touch_user(state: ChannelState, user_id: str) -> TrackedUser:
    users = state.users
    user = users.get(user_id)
    if user is None:
        user = users[user_id] = TrackedUser(times=deque(maxlen=state.config.flood_max_messages))
        if len(users) > state.config.max_tracked_users:
            users.popitem(last=False)  # least recently active; forgets its cooldown and flood
    else:
        users.move_to_end(user_id)
    return user


def answered_at(state: ChannelState, user_id: str) -> float:
    user = state.users.get(user_id)
    return NEVER if user is None else user.last_answered


def ready_at(state: ChannelState, user_id: str, chatter: PendingChatter, now: float) -> float:
    """When ``user_id`` may be answered again: a waiting mention draws on the mention burst,
    other lines wait out the plain cooldown."""
    cfg = state.config
    user = state.users.get(user_id)
    if user is None:
        return NEVER
    if chatter.addressed:
        return mention_ready_at(user, now, cfg)
    return user.last_answered + cfg.user_cooldown_seconds


def note_answered(state: ChannelState, user_id: str, at: float) -> None:
    """An answer to ``user_id`` at ``at`` that this process learns of afterwards (the durable
    store, bot/engagement/durable.py): counted like one made here, unless already known."""
    user = touch_user(state, user_id)
    if at > user.last_answered:
        charge(user, at, state.config)
