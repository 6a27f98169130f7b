"""Plugins' ``ctx.send``, ``ctx.reply`` and ``ctx.ask``, over this deployment's parts.

A plugin's message takes the path of every reply after its turn: the safety gate's outbound
check (``SafetyGate.answer``: lists, links, personal data, the leak check, the moderation model;
audited, a text breaking a rule becomes the withheld line), then ``outbound:<platform>`` on the
bus, where the platform adapter's one chokepoint sends it (rate limits, the mention sanitiser:
``addressed_user_ids`` is empty, so nobody is pinged; on YouTube the day's reply budget). A
message that is not an answer is checked under the rules of its conversation's scope, through a
stand-in message of that conversation written by the plugin. ``ask`` calls the deployment's
model chain through the daily cost cap (``Spend.provider``) and counts its tokens. ``moderate``
publishes a ``ModerationRequest`` on ``moderation:<platform>`` for the platform's gateway.
"""

from __future__ import annotations

import uuid

from bot.bus.base import EventBus
from bot.bus.topics import moderation_topic, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, ModerationRequest, Reply
from bot.llm.base import Provider
from bot.ops.metrics import Metrics, NullMetrics
from bot.ops.model_calls import Spend
from bot.plugins.reach import Reach
from bot.safety.gate import SafetyGate


def plugin_reach(
    *,
    bus: EventBus,
    safety: SafetyGate,
    provider: Provider,
    model: str,
    spend: Spend | None,
    metrics: Metrics | NullMetrics,
    max_tokens: int,
) -> Reach:
    async def send(
        plugin: str, conversation: ConversationKey, text: str, answering: ChatMessage | None
    ) -> None:
        probe = answering or ChatMessage(
            platform=conversation.platform,
            id=f"plugin-{uuid.uuid4().hex}",
            conversation=conversation,
            author=Author(id=f"plugin:{plugin}", display_name=plugin),
            text="",
        )
        checked = safety.guard(probe, await safety.answer(probe, text))
        reply = Reply(
            conversation=conversation,
            text=checked,
            reply_to_id=answering.id if answering is not None else None,
            in_reply_to_platform=answering.platform if answering is not None else None,
        )
        await bus.publish(outbound_topic(conversation.platform), reply)

    async def moderate(request: ModerationRequest) -> None:
        await bus.publish(moderation_topic(request.conversation.platform), request)

    metered = spend.provider(provider, "plugin") if spend is not None else provider
    return Reach(
        send,
        provider=metered,
        model=model,
        max_tokens=max_tokens,
        on_usage=metrics.tokens,
        moderate_function=moderate,
    )
