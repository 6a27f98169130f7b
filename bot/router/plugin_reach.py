"""Plugins' ``ctx.send``, ``ctx.reply`` and ``ctx.ask``, over this deployment's parts.

A plugin's message takes the path of every reply after its turn: the safety gate's outbound
check (``SafetyGate.answer``: lists, links, personal data, the leak check, the moderation model;
audited, a text breaking a rule becomes the withheld line), then ``outbound:<platform>`` on the
bus, where the platform adapter's one chokepoint sends it (rate limits, the mention sanitiser:
``addressed_user_ids`` is empty, so nobody is pinged; on YouTube the day's reply budget). A
message that is not an answer is checked under the rules of its conversation's scope, through a
stand-in message of that conversation written by the plugin. ``ask`` calls the deployment's
model chain through the daily cost cap (``Spend.provider``) and counts its tokens; one about a
message is first checked against, and then counted to, its author's and channel's token quotas
(the scope's, as the safety gate holds them; exempt users are not counted). ``moderate``
publishes a ``ModerationRequest`` on ``moderation:<platform>`` for the platform's gateway.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from bot.bus.base import EventBus
from bot.bus.topics import moderation_topic, outbound_topic
from bot.events import Author, ChatMessage, ConversationKey, ModerationRequest, Reply
from bot.llm.base import Provider
from bot.llm.types import Usage
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

    async def admit_ask(message: ChatMessage) -> tuple[str, int] | None:
        policy = safety.policy(message)
        if safety.quotas is None or not policy.quota.enabled:
            return None
        refused = await safety.quotas.tokens_over(
            policy.quota, message, datetime.now(UTC), exempt=safety.exempt(message, policy)
        )
        return None if refused is None else (refused.rule, refused.resets_in)

    async def count_ask(message: ChatMessage, usage: Usage) -> None:
        policy = safety.policy(message)
        if safety.quotas is None or not policy.quota.enabled:
            return
        await safety.quotas.add_tokens(
            policy.quota,
            message,
            datetime.now(UTC),
            tokens=usage.total_input_tokens + usage.output_tokens,
            exempt=safety.exempt(message, policy),
        )

    async def moderate(request: ModerationRequest) -> None:
        await bus.publish(moderation_topic(request.conversation.platform), request)

    metered = spend.provider(provider, "plugin") if spend is not None else provider
    return Reach(
        send,
        provider=metered,
        model=model,
        max_tokens=max_tokens,
        on_usage=metrics.tokens,
        admit_ask=admit_ask,
        count_ask=count_ask,
        moderate_function=moderate,
    )
