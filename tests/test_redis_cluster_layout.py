"""The Redis Cluster layout of the key catalogue, and the cluster URL's checks (no server).

On a single Redis every key keeps its name (an existing deployment's data stays where it is);
in the cluster layout, each group of keys that one transaction or script combines hashes to one
slot (docs/redis-keys.md, "Redis Cluster layout"), and the bus's partitions spread over slots.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bot.events import ConversationKey
from bot.settings import check_redis_url
from bot.state import keys, keys_interactions
from bot.state.client import slot_of


@pytest.fixture
def cluster() -> Iterator[None]:
    keys.use_cluster_layout(True)
    try:
        yield
    finally:
        keys.use_cluster_layout(False)


def test_a_single_redis_keeps_every_name() -> None:
    assert not keys.cluster_layout()
    assert keys.bus_stream("inbound", 3) == "chorus:v1:bus:main:stream:inbound:3"
    assert keys.bus_lease("inbound", "agent", 3) == "chorus:v1:bus:main:lease:agent:inbound:3"
    assert keys.dedupe("discord", "m1", near=keys.bus_stream("inbound", 3)) == (
        "chorus:v1:dedupe:discord:m1"
    )
    assert keys.memory("discord", "u:1") == "chorus:v1:user:discord:u%3A1:memory"
    assert keys_interactions.interaction_inbox("discord", "a1") == (
        "chorus:v1:gateway:discord:a1:answers"
    )
    assert keys.usage("user", "discord", "u1", "d20250101") == (
        "chorus:v1:usage:user:discord:u1:d20250101"
    )
    assert keys.usage_notice("msg", "discord", "u1", "d20250101") == (
        "chorus:v1:usage:notice:msg:discord:u1:d20250101"
    )
    assert keys.usage_cost("20250101") == "chorus:v1:usage:cost:main:20250101"
    assert keys.quota_holds("youtube", "p1") == "chorus:v1:quota:youtube:p1:holds"
    assert keys.insights_job("discord", "u1") == "chorus:v1:insights:main:job:discord:u1"
    assert keys.budget_user("discord", "u1", "20250101") == (
        "chorus:v1:budget:user:discord:u1:20250101"
    )
    conv = ConversationKey(platform="discord", channel="c1")
    assert keys.history(conv) == "chorus:v1:hist:discord:c1"
    assert keys.summary("sum", conv) == "chorus:v1:summ:sum:discord:c1"
    assert keys.admin_token() == "chorus:v1:admin:token:main"
    assert all(keys.slot_tag(key) is None for key in (keys.bus_stream("inbound", 0),))


@pytest.mark.usefixtures("cluster")
def test_a_turns_guarded_keys_share_the_partitions_slot() -> None:
    inbound = keys.bus_stream("inbound", 5)
    reply = keys.bus_stream("outbound:discord", 5)
    claim = keys.dedupe("discord", "m1", near=inbound)
    assert slot_of(inbound) == slot_of(reply) == slot_of(claim)
    assert inbound.endswith(":5") and claim.startswith("chorus:v1:dedupe:{main.p5}:")
    assert len({slot_of(keys.bus_stream("inbound", p)) for p in range(16)}) == 16


@pytest.mark.usefixtures("cluster")
def test_keys_combined_by_one_operation_share_a_slot() -> None:
    groups = [
        [keys.bus_lease("inbound", "agent", p) for p in range(16)]
        + [keys.bus_members("inbound", "agent")],
        [
            keys.usage("user", "discord", "u1", "h2025010101"),
            keys.usage("chan", "discord", "c1", "d20250101"),
            keys.usage_notice("msg", "discord", "u1", "d20250101"),
            keys.usage_cost("20250101"),
            keys.usage_cost_holds("20250101"),
        ],
        [keys.quota("youtube", "p1", "20250101"), keys.quota_holds("youtube", "p1")]
        + [keys.quota_stream("youtube", "p1")],
        [
            keys.insights_due(),
            keys.insights_deadline(),
            keys.insights_job("discord", "u1"),
            keys.insights_lease("discord", "u1"),
            keys.insights_outcomes(),
        ],
        [keys.budget_user("discord", "u1", "20250101")]
        + [keys.budget_channel("discord", "c1", "20250101")],
        [
            keys.memory("discord", "u1"),
            keys.person_of("discord", "u1"),
            keys.forgotten("discord", "u1"),
            keys.user_conversations("discord", "u1"),
        ],
        [  # a slash command's answer forwarded to its gateway process, and that one's liveness
            keys_interactions.interaction_inbox("discord", "a1"),
            keys_interactions.gateway_alive("discord", "a1"),
        ],
    ]
    for group in groups:
        assert len({slot_of(key) for key in group}) == 1, group
    # a linked person's keys share one slot of their own (bot/state/people_cluster.py); on one
    # Redis they stay untagged, as the alias scripts build them from ``person_prefix``
    person = [keys.person_memory("abc"), keys.person_members("abc"), keys.person_forget("abc")]
    assert len({slot_of(key) for key in person}) == 1
    assert keys.person_memory("abc") == "chorus:v1:user:{person:abc}:memory"
    keys.use_cluster_layout(False)
    assert keys.person_memory("abc") == keys.person_prefix() + "abc:memory"
    keys.use_cluster_layout(True)
    conv = ConversationKey(platform="discord", channel="c1")
    together = [keys.history(conv)] + [keys.summary(kind, conv) for kind in keys.SUMMARY_KINDS]
    assert len({slot_of(key) for key in together}) == 1  # the summariser's write
    assert keys.history(conv) == "chorus:v1:hist:{discord:c1}"


def test_a_cluster_url_names_its_nodes() -> None:
    check_redis_url("redis+cluster://10.0.0.1:7000,10.0.0.2:7001")
    check_redis_url("rediss+cluster://user:secret@10.0.0.1:7000")
    for bad, why in (
        ("redis+cluster://10.0.0.1:x", "host:port"),
        ("redis+cluster://10.0.0.1:7000,:7001", "host:port"),
        ("redis+cluster://10.0.0.1:7000/3", "database 0"),
    ):
        with pytest.raises(ValueError, match=why):
            check_redis_url(bad)


def test_a_sentinel_url_names_its_sentinels_and_service() -> None:
    from bot.settings.state import cluster_nodes, sentinel_service

    url = "redis+sentinel://:secret@10.0.0.1,10.0.0.2:26380/chorus/2"
    check_redis_url(url)
    assert sentinel_service(url) == ("chorus", 2)
    assert cluster_nodes(url, default_port=26379, path_is_db=False) == [
        ("10.0.0.1", 26379),
        ("10.0.0.2", 26380),
    ]
    for bad in ("redis+sentinel://10.0.0.1:26379", "redis+sentinel://10.0.0.1:26379/chorus/x"):
        with pytest.raises(ValueError, match="names the service"):
            check_redis_url(bad)
