"""The ``moderation`` plugin: spam filters and an escalation ladder that act on the chat.

Turned on by a ``[plugins.moderation]`` table in ``chorus.toml`` (``enabled = false`` in a
scope's ``[scope.plugins.moderation]`` turns it off there). It reads every line (``on_message``,
and ``on_screened`` for the lines the safety screen keeps from the bot, a link on a streamer
channel), and a line that trips a filter (``filters``: links without ``!permit``, caps,
symbols, emote flood, zalgo; repeats and copypasta counted in the store) is an offence of its
author in that channel. Offences climb ``ladder``: a warning (the line deleted, the author told
why), a deletion, a timeout of ``timeout_seconds``, and a ban when ``ban`` is on. The count is
an atomic counter in the plugin store shared by every worker; it lapses after
``decay_seconds`` without an offence.

Acting is the gateway's: each step is a ``ModerationRequest`` (``ctx.moderate``)
performed through the platform's own API once the bot's permission is checked, audited whatever
came of it, a missing permission logged once per channel (``bot.platform.moderation``).
``!permit NAME`` (moderators) lets NAME post one link within ``permit_seconds``. Every text it
sends is in ``prompts/plugins/moderation``. docs/moderation-actions.md is the user's guide.
"""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

import prompts
from bot.events import ChatMessage, ModerationRequest, Role
from bot.plugins.builtin.moderation.filters import (
    DEFAULT_EMOTES,
    Thresholds,
    fingerprint,
    has_link,
    text_filter,
)
from bot.plugins.config import settings
from bot.plugins.events import EventContext, on_message, on_screened
from bot.plugins.store import Bucket

log = logging.getLogger("chorus.plugins.moderation")

FilterName = Literal["links", "caps", "symbols", "repeat", "copypasta", "emotes", "zalgo"]
Step = Literal["warn", "delete", "timeout", "ban"]
ALL_FILTERS: tuple[FilterName, ...] = (
    "links",
    "caps",
    "symbols",
    "repeat",
    "copypasta",
    "emotes",
    "zalgo",
)
RULE_TEXTS: dict[FilterName, str] = {  # what each filter's offence is called, to the user
    "links": "plugins/moderation/rule_links",
    "caps": "plugins/moderation/rule_caps",
    "symbols": "plugins/moderation/rule_symbols",
    "repeat": "plugins/moderation/rule_repeat",
    "copypasta": "plugins/moderation/rule_copypasta",
    "emotes": "plugins/moderation/rule_emotes",
    "zalgo": "plugins/moderation/rule_zalgo",
}
LADDER: tuple[Step, ...] = ("warn", "delete", "timeout")
MAX_TIMEOUT = 1_209_600  # two weeks: the longest Twitch and YouTube take


@settings
class ModerationSettings(BaseModel):
    """``[plugins.moderation]``: which filters run and how offences escalate."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """`false` turns the plugin off (set it in a scope to turn it off there only)."""
    filters: list[FilterName] = Field(default_factory=lambda: list(ALL_FILTERS))
    """The filters that run: links, caps, symbols, repeat, copypasta, emotes, zalgo."""
    prefix: str = Field(default="!", min_length=1, max_length=3)
    """What starts a chat command of this plugin (`!permit`); never `/` on Twitch."""
    exempt_moderators: bool = True
    """Moderators and the broadcaster (owner) are never filtered."""
    exempt_subscribers: bool = True
    """Subscribers (members on YouTube) are never filtered."""
    ladder: list[Step] = Field(default_factory=lambda: list(LADDER), min_length=1)
    """What each offence in a row does: the first offence the first step, and so on; past the
    end, the last step again. `ban` is honoured only with `ban = true`."""
    ban: bool = False
    """Let the ladder ban (after its timeout step, a further offence bans); off by default."""
    timeout_seconds: int = Field(default=600, ge=1, le=MAX_TIMEOUT)
    """How long a timeout lasts (Discord allows up to 28 days, Twitch and YouTube 14)."""
    decay_seconds: float = Field(default=3600, ge=10, le=30 * 86400)
    """A user's offences lapse after this many seconds without a new one."""
    permit_seconds: float = Field(default=60, ge=5, le=3600)
    """How long `!permit NAME` lets NAME post one link."""
    caps_ratio: float = Field(default=0.7, gt=0, le=1)
    """Capital letters over letters at or above which a line is shouting."""
    caps_min_letters: int = Field(default=12, ge=1)
    """Shorter lines (fewer letters) are never shouting."""
    symbol_ratio: float = Field(default=0.5, gt=0, le=1)
    """Symbols over visible characters at or above which a line is symbol spam."""
    symbol_min_chars: int = Field(default=12, ge=1)
    """Shorter lines (fewer visible characters) are never symbol spam."""
    emote_max: int = Field(default=8, ge=1)
    """More emotes than this in one line is an emote flood."""
    emote_names: list[str] = Field(default_factory=lambda: list(DEFAULT_EMOTES))
    """Words that are emotes on your channel (emoji and `:shortcodes:` count anyway)."""
    zalgo_marks: int = Field(default=3, ge=2)
    """Combining marks stacked on one character at which a line is zalgo."""
    repeat_count: int = Field(default=3, ge=2)
    """The same line from the same user this many times within `repeat_seconds` is spam."""
    repeat_seconds: float = Field(default=120, ge=1)
    """The window of `repeat_count`."""
    copypasta_count: int = Field(default=4, ge=2)
    """The same line this many times within `copypasta_seconds`, from anyone, is copypasta."""
    copypasta_seconds: float = Field(default=120, ge=1)
    """The window of `copypasta_count`."""
    copypasta_min_chars: int = Field(default=20, ge=1)
    """Shorter lines are never copypasta ("gg", "LUL" from everyone is chat)."""

    def thresholds(self) -> Thresholds:
        return Thresholds(
            caps_ratio=self.caps_ratio,
            caps_min_letters=self.caps_min_letters,
            symbol_ratio=self.symbol_ratio,
            symbol_min_chars=self.symbol_min_chars,
            emote_max=self.emote_max,
            zalgo_marks=self.zalgo_marks,
            emote_names=frozenset(self.emote_names),
        )

    def steps(self) -> list[Step]:
        steps = [step for step in self.ladder if step != "ban" or self.ban]
        if self.ban and "ban" not in steps:
            steps.append("ban")
        return steps or ["warn"]


def step_for(offences: int, steps: list[Step]) -> Step:
    """The ladder's step for a user's ``offences``-th offence in a row (1-based)."""
    return steps[min(max(offences, 1), len(steps)) - 1]


def exempt(message: ChatMessage, conf: ModerationSettings) -> bool:
    roles = message.author.roles
    if conf.exempt_moderators and message.author.is_moderator:
        return True
    return conf.exempt_subscribers and Role.SUBSCRIBER in roles


async def offence(bucket: Bucket, ctx: EventContext, conf: ModerationSettings) -> int:
    """Count one more offence of the author here (atomic; lapses after ``decay_seconds``)."""
    key = f"offences:{ctx.message.author.id}"
    return await bucket.incr(key, ttl=conf.decay_seconds, owner=ctx.user)


async def spam_filter(
    bucket: Bucket, ctx: EventContext, conf: ModerationSettings
) -> FilterName | None:
    """``repeat`` or ``copypasta``, counted per line's fingerprint in the channel's store."""
    text, author = ctx.message.text, ctx.message.author.id
    mark = fingerprint(text)
    if "repeat" in conf.filters:
        said = await bucket.incr(f"said:{author}:{mark}", ttl=conf.repeat_seconds, owner=ctx.user)
        if said >= conf.repeat_count:
            return "repeat"
    if "copypasta" in conf.filters and len(text.strip()) >= conf.copypasta_min_chars:
        seen = await bucket.incr(f"pasta:{mark}", ttl=conf.copypasta_seconds)
        if seen >= conf.copypasta_count:
            return "copypasta"
    return None


def _name(message: ChatMessage) -> str:
    return message.author.display_name or message.author.id


async def permit(ctx: EventContext, conf: ModerationSettings, bucket: Bucket, args: str) -> None:
    """``!permit NAME``: NAME may post one link within ``permit_seconds`` (moderators only)."""
    if not ctx.message.author.is_moderator:
        return
    who = args.strip().split(" ")[0].removeprefix("@").casefold() if args.strip() else ""
    if not who:
        await ctx.send(ctx.message.conversation, prompts.render(
            "plugins/moderation/permit_usage", prefix=conf.prefix
        ))  # fmt: skip
        return
    await bucket.set(f"permit:{who}", True, ttl=conf.permit_seconds)
    text = prompts.render("plugins/moderation/permit", user=who, seconds=int(conf.permit_seconds))
    await ctx.send(ctx.message.conversation, text)


async def permitted(bucket: Bucket, message: ChatMessage) -> bool:
    """A ``!permit`` waiting for the author, used up now (atomically: one link)."""
    names = {message.author.id.casefold(), message.author.display_name.casefold()} - {""}
    for name in names:
        if await bucket.delete(f"permit:{name}"):
            return True
    return False


async def act(ctx: EventContext, conf: ModerationSettings, rule: FilterName, count: int) -> Step:
    """Take the ladder's step for the author's ``count``-th offence of ``rule``."""
    message = ctx.message
    step = step_for(count, conf.steps())
    described = prompts.render(RULE_TEXTS[rule], prefix=conf.prefix)
    reason = prompts.render("plugins/moderation/reason", count=count, rule=described)
    where, user, actor = message.conversation, message.author.id, f"rule:{rule}"
    await ctx.moderate(
        ModerationRequest(
            conversation=where,
            action="delete",
            message_id=message.id,
            user_id=user,
            reason=reason,
            actor=actor,
        )
    )
    if step in ("timeout", "ban"):
        await ctx.moderate(
            ModerationRequest(
                conversation=where,
                action=step,
                user_id=user,
                seconds=conf.timeout_seconds if step == "timeout" else None,
                reason=reason,
                actor=actor,
            )
        )
    name = _name(message)
    if step == "warn":
        await ctx.send(where, prompts.render("plugins/moderation/warn", user=name, rule=described))
    elif step == "timeout":
        minutes = max(1, round(conf.timeout_seconds / 60))
        text = prompts.render(
            "plugins/moderation/timeout", user=name, minutes=minutes, rule=described
        )
        await ctx.send(where, text)
    elif step == "ban":
        await ctx.send(where, prompts.render("plugins/moderation/ban", user=name, rule=described))
    log.info(
        "moderation offence",
        extra={"rule": rule, "step": step, "offences": count, "conversation": str(where)},
    )
    return step


async def check(ctx: EventContext) -> Step | None:
    """One line: ``!permit``, or the filters and, when one trips, the ladder's step."""
    message = ctx.message
    if message.author.is_bot or message.is_direct or not message.text:
        return None
    conf = ctx.settings(ModerationSettings)
    if not conf.enabled:
        return None
    bucket = ctx.store.channel
    text = message.text.strip()
    command = f"{conf.prefix}permit"
    if text == command or text.startswith(command + " "):
        await permit(ctx, conf, bucket, text[len(command) :])
        return None
    if exempt(message, conf):
        return None
    enabled = frozenset(conf.filters)
    rule: FilterName | None = text_filter(text, enabled, conf.thresholds())
    if rule == "links" and await permitted(bucket, message):
        rule = text_filter(text, enabled - {"links"}, conf.thresholds())
    if rule is None:
        rule = await spam_filter(bucket, ctx, conf)
    if rule is None:
        return None
    return await act(ctx, conf, rule, await offence(bucket, ctx, conf))


@on_message(timeout=15)
async def watch(ctx: EventContext) -> None:
    """Every line the bot reads."""
    await check(ctx)


@on_screened(timeout=15)
async def watch_screened(ctx: EventContext) -> None:
    """Every line the safety screen kept from the bot (a link on a streamer channel)."""
    await check(ctx)


__all__ = ["ModerationSettings", "check", "has_link", "step_for", "watch", "watch_screened"]
