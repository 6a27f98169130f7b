"""The router's unit of work: one turn to run (``Item``), a delivery that needs none
(``Drop``), and how a live-chat decision becomes a turn.

Every stage takes or returns these, so they live below all of them. Both kinds of turn -- an
inbound message with its delivery, or a turn the live-chat policy made (a batch, an idle line)
-- carry the same bookkeeping: who the reply may mention, what it answers, what the reply budget
sees (a mention's answer or an unprompted turn, and the mentions to decline if it cannot pay),
and the progress flags the shutdown and the claim need.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from bot.bus.base import Delivery
from bot.engagement.policy import Decision
from bot.engagement.turns import Turn, covered_context
from bot.events import ChatMessage
from bot.quota.plan import Kind
from bot.state.turnlog import TurnRecord


@dataclass
class Progress:
    committed: bool = False  # the reply and its record are in Redis: never release, ack
    hold: str | None = None  # the reply budget reserved for it (where replies cost quota)
    record: TurnRecord | None = None  # an answered turn's numbers, for the turn log


@dataclass(frozen=True)
class Item:
    """One turn to run: an inbound message (with its delivery, acked after), or a live-chat
    turn the policy made (a batch or an idle line: no delivery)."""

    message: ChatMessage
    delivery: Delivery[ChatMessage] | None
    addressed: tuple[str, ...]
    reply_to_id: str | None
    context: str = ""
    forced: str | None = None  # a fixed answer (live-chat pause/resume acknowledgements)
    # what the reply budget sees (bot/quota/gate.py): a mention's answer, or unprompted
    kind: Kind = "mention"
    mentions: tuple[ChatMessage, ...] = ()  # declined if the budget cannot pay for the reply
    received: float = field(default_factory=time.perf_counter)  # for the overhead metric
    progress: Progress = field(default_factory=Progress)


@dataclass(frozen=True, slots=True)
class Drop:
    """A delivery that needs no turn: it is acked (a dead letter is moved to its topic first)."""

    dead_letter: bool = False


def answer_item(delivery: Delivery[ChatMessage], decision: Decision) -> Item:
    """A message the policy answers now, with the lines of its author it covers."""
    message = delivery.event
    covered = tuple(p.message for p in decision.covered if p.addressed)
    return Item(
        message,
        delivery,
        (message.author.id,),
        message.id,
        covered_context(decision),
        mentions=(message, *covered) if message.addressed else (),
    )


def turn_item(turn: Turn) -> Item:
    """A turn the policy made (a batch, an idle line): no delivery to ack."""
    return Item(
        turn.message,
        None,
        turn.addressed,
        turn.reply_to_id,
        turn.context,
        kind=turn.kind,
        mentions=turn.mentions,
    )
