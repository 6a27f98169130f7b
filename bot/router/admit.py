"""Stage one, admit: what a delivery becomes once the consume loop pulled it.

In the order that matters: a message delivered more often than ``max_deliveries`` is a dead
letter (every worker so far died on it); it is counted and observed as arrived; the screen
(``bot.router.screen``) may drop or refuse it; a line that passed is the plugins' ``on_message``
(and ``on_stream_event``: ``bot.plugins.events``, started in the background, once per message),
a line it took out their ``on_screened``; the overlay's voice (``bot.voice.speaker``) reads a
stream event aloud and applies a moderator's ``!skip`` / ``!tts`` (dropped here, never
answered), in the background too;
its scope may ignore it (answered only when
addressed); in a busy live chat the engagement policy (``bot.engagement``) sees it in arrival
order and decides now whether it is answered now (with the lines it covers), acknowledged (a
moderator's command) or left for a batch. What is left is a turn (``Item``) queued behind its
conversation; anything else is a ``Drop`` the router acks at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bot.bus.base import Delivery
from bot.engagement.ledger import Action
from bot.engagement.turns import LiveChat, ack
from bot.events import ChatMessage
from bot.ops.metrics import MetricsSink
from bot.plugins.events import PluginEvents
from bot.router.items import Drop, Item, answer_item
from bot.router.observe import TurnObserver
from bot.router.scoping import Profile
from bot.router.screen import Screen

if TYPE_CHECKING:  # the overlay's voice is imported only where it is on (bot.app)
    from bot.voice.speaker import Speaker


class Admit:
    """Admission of one router's deliveries."""

    def __init__(
        self,
        *,
        screen: Screen,
        observer: TurnObserver,
        metrics: MetricsSink,
        engagement: LiveChat | None = None,
        max_deliveries: int = 3,
        events: PluginEvents | None = None,
        speaker: Speaker | None = None,
    ) -> None:
        self.events = events
        self.speaker = speaker
        self.screen = screen
        self.observer = observer
        self.metrics = metrics
        self.engagement = engagement
        self.max_deliveries = max_deliveries

    def __call__(self, delivery: Delivery[ChatMessage], profile: Profile) -> Item | Drop:
        message = delivery.event
        if delivery.attempt > self.max_deliveries:
            return Drop(dead_letter=True)
        item = Item(message, delivery, (message.author.id,), message.id)
        if message.channel_event is not None:  # a join, a leave, a reaction: never answered
            events = self.events if delivery.attempt == 1 else None
            if events and self.screen.safety.screen(message).action == "pass":
                events.seen(message)  # the plugins' handlers (a blocked user's: none)
            return Drop()
        self.metrics.message_in(message.platform)
        self.observer.arrived(message)
        screened = self.screen(item)
        if screened is not None:
            if self.events and delivery.attempt == 1:  # the plugins' on_screened (moderation)
                self.events.screened(message)
            return screened
        if self.events and delivery.attempt == 1:  # the plugins' on_message: off the reply path
            self.events.seen(message)
        speaker = self.speaker
        if speaker is not None and delivery.attempt == 1:  # the overlay's voice, off the path
            if speaker.is_command(message):  # a moderator's !skip / !tts: applied, not answered
                speaker.start(speaker.command(message))
                return Drop()
            if message.stream_event is not None:  # a cheer, a Super Chat: read aloud
                speaker.start_event(message)  # queued after the channel's earlier events
        engagement = self.engagement
        route = profile.route(message, engagement is not None and engagement.applies(message))
        if route == "ignore":  # the scope answers only when addressed
            self.observer.note(message, "ignored", "not addressed")
            return Drop()
        if route == "live" and engagement is not None:
            decision = engagement.observe(message)  # arrival order and time, O(1)
            self.metrics.engagement(message.platform, decision.action.value)
            if decision.action is Action.ANSWER_NOW:
                return answer_item(delivery, decision)
            if decision.action is Action.COMMAND and (text := ack(decision.reason)):
                return Item(message, delivery, (message.author.id,), message.id, forced=text)
            self.observer.live_quiet(message, decision)
            return Drop()
        return item
