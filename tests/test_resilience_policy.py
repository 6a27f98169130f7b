"""The retry policy of bot/resilience.py on its own: Retry-After parsing (seconds, milliseconds, HTTP dates) and the delays the module docstring promises (equal, full and no jitter, growth, the cap, refused policies). Pure: ``random.Random`` is injected."""

from __future__ import annotations

import email.utils
import random

import pytest

from bot.resilience import (
    Failure,
    RetryPolicy,
    parse_retry_after,
    wait_for,
)
from tests.resilience_rig import NOW


# -- parse_retry_after -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"Retry-After": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"RETRY-AFTER": "0"}, 0.0),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after-ms": "2500"}, 2.5),
        ({"Retry-After-Ms": "250", "Retry-After": "9"}, 0.25),  # ms is more precise: it wins
        ({"retry-after-ms": "soon", "retry-after": "4"}, 4.0),  # bad ms falls back to seconds
        ({"retry-after": "whenever"}, None),
        ({"x-other": "1"}, None),
        ({}, None),
        (None, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str] | None, expected: float | None) -> None:
    assert parse_retry_after(headers, now=NOW) == expected


def test_parse_retry_after_http_date() -> None:
    when = email.utils.formatdate(NOW + 30, usegmt=True)
    assert parse_retry_after({"Retry-After": when}, now=NOW) == pytest.approx(30.0)


def test_parse_retry_after_http_date_in_the_past_is_zero() -> None:
    when = email.utils.formatdate(NOW - 30, usegmt=True)
    assert parse_retry_after({"Retry-After": when}, now=NOW) == 0.0


# -- the delay: what the module docstring promises ------------------------------------------
@pytest.mark.parametrize("attempt", range(1, 12))
def test_equal_jitter_draws_from_the_upper_half_of_the_ceiling(attempt: int) -> None:
    policy = RetryPolicy(base_delay=0.5, max_delay=30.0)  # the default: jitter=0.5
    cap = min(30.0, 0.5 * 2 ** (attempt - 1))
    rng = random.Random(attempt)
    delays = [policy.delay(attempt, rng) for _ in range(200)]
    assert all(cap / 2 <= d <= cap for d in delays)
    assert min(delays) < cap * 0.6 and max(delays) > cap * 0.9  # spread over the whole half


def test_full_jitter_draws_from_zero_to_the_ceiling() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0, jitter=1.0)
    rng = random.Random(3)
    delays = [policy.delay(4, rng) for _ in range(200)]
    assert all(0.0 <= d <= 8.0 for d in delays)
    assert min(delays) < 1.0  # reaches well below half the ceiling, unlike equal jitter


def test_no_jitter_waits_exactly_the_ceiling_which_grows_then_is_capped() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=8.0, jitter=0.0)
    assert [policy.delay(n) for n in range(1, 7)] == [1.0, 2.0, 4.0, 8.0, 8.0, 8.0]


def test_a_huge_attempt_number_stays_at_the_cap() -> None:
    assert RetryPolicy(base_delay=0.1, max_delay=5.0, jitter=0.0).delay(100_000) == 5.0


def test_the_delay_is_jittered() -> None:
    rng = random.Random(0)
    assert len({RetryPolicy(base_delay=1.0).delay(3, rng) for _ in range(20)}) > 1


@pytest.mark.parametrize(
    "bad",
    [{"jitter": 1.5}, {"jitter": -0.1}, {"base_delay": -1.0}, {"max_retries": -1}],
)
def test_a_nonsensical_policy_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(**bad)  # type: ignore[arg-type]


def test_wait_for_honours_caps_or_refuses_a_long_retry_after() -> None:
    long = Failure(retryable=True, retry_after=500.0)
    assert wait_for(RetryPolicy(max_retry_after=60.0), 1, long) == (60.0, False)
    refusing = RetryPolicy(max_retry_after=60.0, too_long="give_up")
    assert wait_for(refusing, 1, long) == (500.0, True)
    assert wait_for(refusing, 1, Failure(retryable=True, retry_after=30.0)) == (30.0, False)
