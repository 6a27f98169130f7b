"""How one message is answered: identity, size limits, the tool loop's caps and reasoning, and
how many turns a process holds and how long it lets them finish when it stops, and where answers
are streamed (shown while the model writes them) instead of sent once whole.

These are the router's and the agent's knobs, apart from the LLM section because they hold for
whichever vendor answers.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from bot.events import ConversationKey
from bot.settings.base import Section, comma_set

# The platforms whose adapters can show an answer while it is written (they edit a message or
# print as it comes); Twitch and YouTube cannot edit a chat message, so they get it whole.
STREAMING_PLATFORMS = frozenset({"console", "discord", "slack"})
_ALL = frozenset({"on", "auto", "true", "yes", "1", "all"})
_NONE = frozenset({"off", "false", "no", "0", "none"})


class AgentSettings(Section):
    bot_name: str = Field(default="Chorus", min_length=1, validation_alias="CHORUS_BOT_NAME")
    """The name the bot uses for itself."""
    vision: bool = Field(default=True, validation_alias="CHORUS_VISION")
    """Send attached images to the model as images; `false` describes them instead."""
    max_output_tokens: int = Field(default=1024, ge=1, validation_alias="CHORUS_MAX_OUTPUT_TOKENS")
    """Upper bound of one answer, in tokens (thinking budgets come on top)."""
    max_message_chars: int = Field(default=8000, ge=1, validation_alias="CHORUS_MAX_MESSAGE_CHARS")
    """Longest message the bot reads, in characters; a longer one gets a clear refusal."""
    max_tool_iterations: int = Field(
        default=24, ge=1, le=100, validation_alias="CHORUS_MAX_TOOL_ITERATIONS"
    )
    """Model calls per message at most (the tool loop's cap)."""
    turn_budget_seconds: float = Field(default=120.0, gt=0, validation_alias="CHORUS_TURN_BUDGET")
    """Seconds one message may take in all."""
    reasoning: Literal["auto", "off", "low", "medium", "high"] = Field(
        default="auto", validation_alias="CHORUS_REASONING"
    )
    """Extended thinking or reasoning effort: `auto` (a rule decides per message), `off`, or a
    forced `low`, `medium`, `high`."""
    reasoning_max: Literal["low", "medium", "high"] = Field(
        default="medium", validation_alias="CHORUS_REASONING_MAX"
    )
    """The highest level `auto` may choose."""
    max_turns_in_flight: int = Field(
        default=128, ge=1, validation_alias="CHORUS_MAX_TURNS_IN_FLIGHT"
    )
    """Messages one process holds at once, answering or queued behind their conversation; the next
    is taken from the bus only when one is done."""
    shutdown_grace: float = Field(default=20.0, ge=0, validation_alias="CHORUS_SHUTDOWN_GRACE")
    """Seconds a stopping process lets the answers in progress finish."""
    stream_replies: frozenset[str] = Field(
        default=STREAMING_PLATFORMS, validation_alias="CHORUS_STREAM_REPLIES"
    )
    """Show answers while the model writes them: `on` (console, Discord, Slack), `off`, or a comma
    list of those platforms."""

    @field_validator("stream_replies", mode="before")
    @classmethod
    def _platforms(cls, value: Any) -> Any:
        """``on`` (every platform that can), ``off``, or a comma list of platforms."""
        if isinstance(value, str):
            word = value.strip().lower()
            if word in _ALL:
                return STREAMING_PLATFORMS
            if word in _NONE or not word:
                return frozenset()
            value = comma_set(word)
        if isinstance(value, frozenset | set | list | tuple):
            unknown = sorted(set(value) - STREAMING_PLATFORMS)
            if unknown:
                raise ValueError(
                    f"cannot stream to {', '.join(unknown)}: use on, off or a list of "
                    f"{', '.join(sorted(STREAMING_PLATFORMS))}"
                )
            return frozenset(value)
        return value

    def streams(self, conversation: ConversationKey) -> bool:
        """Whether answers in ``conversation`` are streamed: the one place that decides it, so
        a per-scope setting can override it here later."""
        return conversation.platform in self.stream_replies
