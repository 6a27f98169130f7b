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
