"""DISCORD_SHARD_IDS and DISCORD_SHARD_COUNT: ranges parsed, mistakes named by their variable."""

from __future__ import annotations

import pytest

from bot.settings import ConfigError, load_settings
from bot.settings.discord import DiscordSettings, check_shard_ids, parse_shard_ids


def settings(**env: str) -> DiscordSettings:
    return load_settings(environ={"DISCORD_TOKEN": "t", **env}, env_file=None, config=False).discord


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("0-1", (0, 1)),
        ("2-3", (2, 3)),
        ("3", (3,)),
        (" 0 - 2 ", (0, 1, 2)),
        ("0-1,4", (0, 1, 4)),
        ("1,0-2", (1, 0, 2)),
        ("", ()),
    ],
)
def test_shard_ranges_parse(text: str, ids: tuple[int, ...]) -> None:
    assert parse_shard_ids(text) == ids


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("a-1", "not a shard range"),
        ("0-", "not a shard range"),
        ("-1", "not a shard range"),
        ("0..3", "not a shard range"),
        ("3-1", "ends before it starts"),
    ],
)
def test_a_bad_range_is_refused_naming_the_variable(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as error:
        settings(DISCORD_SHARD_IDS=text)
    message = str(error.value)
    assert "DISCORD_SHARD_IDS" in message and says in message


def test_ids_beyond_the_count_are_refused_naming_both_variables() -> None:
    with pytest.raises(ConfigError) as error:
        settings(DISCORD_SHARD_IDS="2-4", DISCORD_SHARD_COUNT="4")
    message = str(error.value)
    assert "DISCORD_SHARD_IDS names shard 4" in message
    assert "DISCORD_SHARD_COUNT" in message and "0 to 3" in message


def test_a_count_below_one_is_refused() -> None:
    with pytest.raises(ConfigError, match="DISCORD_SHARD_COUNT"):
        settings(DISCORD_SHARD_COUNT="0")


def test_defaults_are_every_shard_and_discords_count() -> None:
    section = settings()
    assert section.shard_ids is None
    assert section.shard_count is None
    assert section.identify_window == 5.0


def test_a_range_and_a_count_that_fit() -> None:
    section = settings(DISCORD_SHARD_IDS="2-3", DISCORD_SHARD_COUNT="4")
    assert section.shard_ids == (2, 3)
    assert section.shard_count == 4


def test_the_recommended_count_is_checked_the_same_way() -> None:
    with pytest.raises(ValueError, match="recommended by Discord"):
        check_shard_ids((0, 1, 2), 2, source="recommended by Discord")


@pytest.mark.parametrize(
    ("index", "gateways", "count", "ids"),
    [
        ("0", "2", 4, (0, 1)),
        ("chorus-discord-gateway-1", "2", 4, (2, 3)),
        ("2", "3", 8, (6, 7)),  # blocks of 3: the last is shorter
        ("0", "1", 3, (0, 1, 2)),
    ],
)
def test_a_statefulset_pod_picks_its_block_of_shards(
    index: str, gateways: str, count: int, ids: tuple[int, ...]
) -> None:
    section = settings(DISCORD_GATEWAY_INDEX=index, DISCORD_GATEWAY_COUNT=gateways)
    assert section.shards_of(count) == ids


def test_an_explicit_range_wins_over_the_gateway_index() -> None:
    section = settings(DISCORD_SHARD_IDS="3", DISCORD_GATEWAY_INDEX="0", DISCORD_GATEWAY_COUNT="2")
    assert section.shards_of(4) == (3,)


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({"DISCORD_GATEWAY_INDEX": "2", "DISCORD_GATEWAY_COUNT": "2"}, "runs from 0 to 1"),
        ({"DISCORD_GATEWAY_INDEX": "gateway", "DISCORD_GATEWAY_COUNT": "2"}, "-NUMBER"),
    ],
)
def test_a_bad_gateway_index_is_refused_naming_the_variable(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError) as error:
        settings(**env)
    message = str(error.value)
    assert "DISCORD_GATEWAY_" in message and says in message


@pytest.mark.parametrize("env", [{"DISCORD_GATEWAY_INDEX": "1"}, {"DISCORD_GATEWAY_COUNT": "2"}])
def test_the_gateway_index_and_count_go_together(env: dict[str, str]) -> None:
    problem = settings(**env).gateway_pair_problem()
    assert problem is not None and "go together" in problem
    assert "DISCORD_GATEWAY_INDEX" in problem and "DISCORD_GATEWAY_COUNT" in problem
    assert settings().gateway_pair_problem() is None
