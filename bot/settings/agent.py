"""How one message is answered: identity, size limits, the tool loop's caps and reasoning, and
how many turns a process holds and how long it lets them finish when it stops.

These are the router's and the agent's knobs, apart from the LLM section because they hold for
whichever vendor answers.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from bot.settings.base import Section


class AgentSettings(Section):
    bot_name: str = Field(default="Chorus", min_length=1, validation_alias="CHORUS_BOT_NAME")
    vision: bool = Field(default=True, validation_alias="CHORUS_VISION")
    max_output_tokens: int = Field(default=1024, ge=1, validation_alias="CHORUS_MAX_OUTPUT_TOKENS")
    max_message_chars: int = Field(default=8000, ge=1, validation_alias="CHORUS_MAX_MESSAGE_CHARS")
    max_tool_iterations: int = Field(
        default=24, ge=1, le=100, validation_alias="CHORUS_MAX_TOOL_ITERATIONS"
    )
    turn_budget_seconds: float = Field(default=120.0, gt=0, validation_alias="CHORUS_TURN_BUDGET")
    reasoning: Literal["auto", "off", "low", "medium", "high"] = Field(
        default="auto", validation_alias="CHORUS_REASONING"
    )
    reasoning_max: Literal["low", "medium", "high"] = Field(
        default="medium", validation_alias="CHORUS_REASONING_MAX"
    )
    max_turns_in_flight: int = Field(
        default=128, ge=1, validation_alias="CHORUS_MAX_TURNS_IN_FLIGHT"
    )
    shutdown_grace: float = Field(default=20.0, ge=0, validation_alias="CHORUS_SHUTDOWN_GRACE")
