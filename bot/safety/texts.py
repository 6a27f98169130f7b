"""What the safety layer says (``prompts/safety/*``): the refusal, the safe line that replaces a
flagged answer, the quota notices and ``/usage``.

Why apart from the gate: the golden tests and the gate must render the same words, and none of
these ever repeats the text that was flagged.
"""

from __future__ import annotations

import prompts
from bot.quota.users import QuotaLimits, Refusal


def refusal() -> str:
    """The short answer to a flagged message (``CHORUS_MODERATION_ACTION=refuse``)."""
    return prompts.render("safety/refusal")


def withheld() -> str:
    """The safe line sent instead of a flagged answer."""
    return prompts.render("safety/withheld")


def wait(seconds: int) -> str:
    minutes = max(1, round(seconds / 60))
    if minutes < 90:
        return prompts.render("safety/wait_minutes", count=minutes)
    return prompts.render("safety/wait_hours", count=round(minutes / 60))


LIMITS = {
    ("messages", "hour"): "safety/limit_messages_hour",
    ("messages", "day"): "safety/limit_messages_day",
    ("tokens", "hour"): "safety/limit_tokens_hour",
    ("tokens", "day"): "safety/limit_tokens_day",
}


def limit(unit: str, period: str, count: float) -> str:
    """``20 messages an hour``..."""
    return prompts.render(LIMITS[unit, period], count=f"{int(count):,}")


def quota_notice(refusal: Refusal) -> str:
    """The one notice of a period: which limit, and when it resets."""
    if refusal.scope == "cost":
        return prompts.render("safety/quota_cost", wait=wait(refusal.resets_in))
    name = "safety/quota_user" if refusal.scope == "user" else "safety/quota_channel"
    what = limit(refusal.unit, refusal.period, refusal.limit)
    return prompts.render(name, limit=what, wait=wait(refusal.resets_in))


def usage(
    used: dict[str, tuple[int, int]],
    limits: QuotaLimits,
    *,
    exempt: bool,
    spend: tuple[float, float] | None = None,
) -> str:
    """``/usage``: the author's messages and tokens this hour and today, and their limits; with
    a daily cost cap also the deployment's ``spend`` today (spent, reserved; USD)."""
    text = _usage(used, limits, exempt=exempt)
    if spend is None or limits.cost_usd_per_day is None:
        return text
    spent, reserved = spend
    cost = prompts.render(
        "safety/usage_cost",
        spent=_usd(spent),
        cap=_usd(limits.cost_usd_per_day),
        reserved=_usd(reserved),
    )
    return f"{text}\n{cost}"


def _usd(amount: float) -> str:
    """``$0.42``; amounts under a cent keep four decimals (``$0.0031``)."""
    return f"${amount:,.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.4f}"


def _usage(used: dict[str, tuple[int, int]], limits: QuotaLimits, *, exempt: bool) -> str:
    if not limits.enabled:
        return prompts.render("safety/usage_off")
    hour, day = used.get("hour", (0, 0)), used.get("day", (0, 0))
    text = prompts.render(
        "safety/usage",
        hour_messages=f"{hour[0]:,}",
        hour_tokens=f"{hour[1]:,}",
        day_messages=f"{day[0]:,}",
        day_tokens=f"{day[1]:,}",
    )
    if exempt:
        return f"{text}\n{prompts.render('safety/usage_exempt')}"
    mine = [
        limit(unit, period, value)
        for unit in ("messages", "tokens")
        for period in ("hour", "day")
        if (value := getattr(limits, f"user_{unit}_{period}")) is not None
    ]
    if not mine:
        return f"{text}\n{prompts.render('safety/usage_no_limits')}"
    return f"{text}\n{prompts.render('safety/usage_limits', limits=', '.join(mine))}"
