"""The reply budget at the live-chat turns (bot/quota/gate.py through ``LiveChat``): mentions are
paid before anything unprompted, a room batch waits (logged once, counted) while the budget's
room is closed, a mention the budget cannot pay for is declined ``quota``, and the YouTube
engagement section fills ``Engagement.overrides``. The ledger is the real one, on the embedded
store."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from bot.engagement.policy import Engagement, PolicyConfig
from bot.engagement.turns import LiveChat, platform_overrides, policy_config
from bot.events import Author, ChatMessage, ConversationKey
from bot.ops.metrics import Metrics
from bot.quota.gate import ReplyGate
from bot.quota.ledger import QuotaLedger
from bot.quota.plan import QuotaConfig
from bot.settings import ConfigError, EngagementSettings
from bot.state import connect
from tests.redis_cluster import WITH_CLUSTER, store_url


@pytest.fixture(params=WITH_CLUSTER)
def redis_url(request: pytest.FixtureRequest, key_tag: str) -> Iterator[str]:
    """The stores, and a Redis Cluster of three primaries (``tests/redis_cluster.py``)."""
    yield from store_url(request, key_tag)


START = datetime(2025, 6, 2, 17, 0, tzinfo=UTC)  # 10:00 PDT
CONFIG = QuotaConfig(daily_units=3_000, reserved_sends=4, stream_hours=1.0)
YT = ConversationKey(platform="youtube", channel="chat-1")
TW = ConversationKey(platform="twitch", channel="streamer")


@dataclass
class Rig:
    live: LiveChat
    ledger: QuotaLedger
    clock: list[float]
    metrics: Metrics
    n: int = 0

    def say(self, conv: ConversationKey, user: str, *, mention: bool = False) -> ChatMessage:
        self.n += 1
        message = ChatMessage(
            platform=conv.platform,
            id=f"m{self.n}",
            conversation=conv,
            author=Author(id=user, display_name=user),
            text=f"@Chorus hi {self.n}" if mention else f"line {self.n}",
            mentions_bot=mention,
            ambient=not mention,
        )
        self.live.observe(message)
        return message

    def counted(self, decision: str) -> float:
        text = generate_latest(self.metrics.registry).decode()
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.labels.get("decision") == decision and sample.name.endswith("_total"):
                    return sample.value
        return 0.0


@pytest.fixture
async def rig(key_tag: str) -> AsyncIterator[Rig]:
    redis = await connect.open_redis(f"memory://budget-{key_tag}")
    clock = [START.timestamp()]
    ledger = QuotaLedger(
        redis,
        CONFIG,
        project=f"{key_tag}.apps",
        clock=lambda: datetime.fromtimestamp(clock[0], UTC),
    )
    await ledger.follow(START, "stream")
    metrics = Metrics(process_metrics=False)
    policy = PolicyConfig(min_pending=3, min_gap_seconds=0, channel_cooldown_seconds=0)
    gate = ReplyGate(CONFIG, clock=lambda: clock[0], ledger=ledger)
    live = LiveChat(Engagement(policy), clock=lambda: clock[0], metrics=metrics, budget=gate)
    try:
        yield Rig(live, ledger, clock, metrics)
    finally:
        await redis.aclose()


async def _spend(rig: Rig, units: int) -> None:
    await rig.ledger.charge(units, kind="read")
    await rig.live.maintain()


async def test_room_batches_wait_for_the_budget_and_mentions_do_not(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chorus.live")
    budget = await rig.live.budget.refresh()
    assert budget is not None and budget.room > 0
    # the mention reserve takes everything beyond reading: no room for unprompted turns
    await _spend(rig, budget.room)
    for user in ("a", "b", "c"):
        rig.say(YT, user)
        rig.say(TW, user)
    turns = rig.live.tick()
    assert [t.message.conversation for t in turns] == [TW]  # Twitch replies cost nothing
    assert rig.live.tick() == []  # still held; logged and counted once
    held = [r for r in caplog.records if "held back for the reply budget" in r.getMessage()]
    assert len(held) == 1 and held[0].conversation == str(YT)  # type: ignore[attr-defined]
    assert rig.counted("held_budget") == 1
    # a mention is answered at once, paid from what is beyond the reading reserve
    mention = rig.say(YT, "d", mention=True)
    paid, hold = await rig.live.pay(mention, "mention", (mention,))
    assert paid and hold == f"{YT}|{mention.id}"
    await rig.live.maintain()  # the mentions seen go to the ledger with the next read
    view = await rig.ledger.view()
    assert view.usage.held == CONFIG.reply_units and view.stream is not None
    assert view.stream.mentions == 1


async def test_an_unprompted_turn_takes_the_room_and_the_next_waits_its_gap(rig: Rig) -> None:
    await rig.live.maintain()
    for user in ("a", "b", "c"):
        rig.say(YT, user)
    turns = rig.live.tick()
    assert [(t.kind, t.mentions) for t in turns] == [("room", ())]
    paid, hold = await rig.live.pay(turns[0].message, "room", ())
    assert paid and hold is not None
    gap = rig.live.budget.budget.room_gap if rig.live.budget.budget else 0
    for user in ("d", "e", "f"):
        rig.say(YT, user)
    rig.clock[0] += gap / 2
    await rig.live.maintain()
    assert rig.live.tick() == []
    rig.clock[0] += gap / 2 + 1
    await rig.live.maintain()
    assert [t.kind for t in rig.live.tick()] == ["room"]


async def test_a_mention_the_budget_cannot_pay_for_is_declined_quota(
    rig: Rig, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="chorus.live")
    budget = await rig.live.budget.refresh()
    assert budget is not None
    await _spend(rig, budget.replies_left - 40)  # not even one piece (50) is left for replies
    mention = rig.say(YT, "a", mention=True)
    paid, hold = await rig.live.pay(mention, "mention", (mention,))
    assert (paid, hold) == (False, None)
    declined = [r for r in caplog.records if r.getMessage() == "live chat: mention declined"]
    assert [(r.message_id, r.reason) for r in declined] == [(mention.id, "quota")]  # type: ignore[attr-defined]
    assert rig.counted("declined_quota") == 1 and rig.live.declined == 1
    # Twitch is not budgeted: always paid, no hold
    other = rig.say(TW, "a", mention=True)
    assert await rig.live.pay(other, "mention", (other,)) == (True, None)


def test_youtube_thresholds_override_the_global_ones() -> None:
    settings = EngagementSettings.model_validate(
        {"CHORUS_ENGAGE_MIN_GAP_SECONDS": "30", "CHORUS_ENGAGE_USER_COOLDOWN_SECONDS": "20"}
    )
    overrides = platform_overrides(settings)
    engagement = Engagement(policy_config(settings), overrides)
    youtube, twitch = engagement.config_for(YT), engagement.config_for(TW)
    assert (twitch.min_gap_seconds, twitch.max_batch_chatters) == (30, 2)
    assert (youtube.min_gap_seconds, youtube.max_batch_chatters) == (300, 3)  # YouTube defaults
    assert youtube.user_cooldown_seconds == 20  # unset for YouTube: the global value
    bad = EngagementSettings.model_validate({"CHORUS_ENGAGE_YOUTUBE_USER_COOLDOWN_SECONDS": "999"})
    with pytest.raises(ConfigError, match="CHORUS_ENGAGE_YOUTUBE_"):
        platform_overrides(bad)


def test_without_room_only_deferred_mentions_are_due() -> None:
    """``due(room=False)``: the reply budget holds room batches back, never a mention that
    waited out its user's cooldown."""
    from bot.engagement.policy import ChannelState, due, room_ready
    from bot.engagement.policy import observe as decide

    config = PolicyConfig(
        min_pending=2, min_gap_seconds=0, user_cooldown_seconds=10, mention_burst=1
    )
    state = ChannelState(config)
    rig_now = 100.0

    def msg(n: int, user: str, *, mention: bool = False) -> ChatMessage:
        return ChatMessage(
            platform="youtube", id=f"d{n}", conversation=YT,
            author=Author(id=user, display_name=user), text=f"line {n}",
            mentions_bot=mention, ambient=not mention,
        )  # fmt: skip

    decide(state, msg(1, "a", mention=True), rig_now)  # answered now: a's cooldown starts
    decide(state, msg(2, "a", mention=True), rig_now + 1)  # waits out the cooldown
    decide(state, msg(3, "b"), rig_now + 2)
    decide(state, msg(4, "c"), rig_now + 3)
    assert room_ready(state, rig_now + 5)
    assert due(state, rig_now + 5, room=False) is None  # the room batch waits
    batch = due(state, rig_now + 11, room=False)
    assert batch is not None and batch.user_ids == ("a",)  # the deferred mention does not
    # the room batch's lines are still there, due again after the channel cooldown
    assert state.pending_messages == 2 and room_ready(state, rig_now + 17)
