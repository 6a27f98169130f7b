"""A user buffer at the default caps with every entry at its maximum length: the worst case
for the 4 KB budget, shared by the store tests and the benchmark."""

from __future__ import annotations

from datetime import UTC, datetime

from bot.memory.buffers import Pin, Recommendation, UserBuffer, source_ref
from bot.settings.memory import PIN_TEXT_MAX, REC_TEXT_MAX, TOOL_MAX

T0 = datetime(2025, 1, 2, 3, 4, 5, tzinfo=UTC)


def full_buffer(user: str, char: str) -> UserBuffer:
    def text(limit: int, salt: int) -> str:
        return (f"{salt:02d}" + char * limit)[:limit]

    return UserBuffer(
        platform="discord",
        user_id=user,
        timezone="America/Argentina/ComodRivadavia",
        pins=tuple(
            Pin(
                text=text(PIN_TEXT_MAX, n),
                source=source_ref(f"LCC.{'x' * 90}{n}"),
                confidence=1.0,
                created_at=T0,
                updated_at=T0,
            )
            for n in range(20)
        ),
        recommendations=tuple(
            Recommendation(text=text(REC_TEXT_MAX, n), tool="t" * TOOL_MAX, created_at=T0)
            for n in range(10)
        ),
    )
