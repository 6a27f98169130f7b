"""Settings of per-user memory, prompt enrichment and the insights agent.

One section of the settings root, so the memory feature stays one self-contained piece the
composition root hands to the stores, the router and the insights worker. The entry bounds
are constants, not settings: they are what keeps a buffer within 4 KB of Redis memory at the
default caps (``MemorySettings.max_bytes`` computes the budget from them).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from bot.settings.allowlist import KNOWLEDGE_ALLOW_VARIABLE, Allowlist
from bot.settings.base import Section, comma_set
from bot.settings.llm import ModelSpec, parse_model_spec

# Entry bounds, chosen so the default caps fit in 4 KB of Redis memory.
PIN_TEXT_MAX = 64
REC_TEXT_MAX = 56
TOOL_MAX = 32
SOURCE_MAX = 20
TIMEZONE_MAX = 64
EPOCH_DIGITS = 10  # seconds since 1970, until the year 2286

# Cheap models per vendor for the insights agent (CHORUS_INSIGHTS_MODEL overrides).
INSIGHTS_MODELS = {
    "anthropic": "claude-haiku-4-5",
    "openai": "gpt-4.1-nano",
    "gemini": "gemini-2.5-flash-lite",
}


class MemorySettings(Section):
    """Memory, relevance and insights settings (``.env.example`` documents each variable)."""

    pins_max: int = Field(default=20, ge=1, le=100, validation_alias="CHORUS_PINS_MAX")
    recs_max: int = Field(default=10, ge=0, le=100, validation_alias="CHORUS_RECS_MAX")
    ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60, validation_alias="CHORUS_MEMORY_TTL")
    history_ttl_seconds: int = Field(
        default=7 * 24 * 3600, ge=60, validation_alias="CHORUS_HISTORY_TTL"
    )
    prompt_pins: int = Field(default=2, ge=0, le=20, validation_alias="CHORUS_PROMPT_PINS")
    prompt_recs: int = Field(default=1, ge=0, le=20, validation_alias="CHORUS_PROMPT_RECS")
    pin_threshold: float = Field(default=0.1, ge=0, validation_alias="CHORUS_PIN_THRESHOLD")
    rec_threshold: float = Field(default=0.05, ge=0, validation_alias="CHORUS_REC_THRESHOLD")
    context_chars: int = Field(
        default=800, ge=300, le=20_000, validation_alias="CHORUS_CONTEXT_CHARS"
    )

    # Semantic recall (bot/memory/recall.py): empty = lexical relevance only.
    embedding_model: str = Field(default="", validation_alias="CHORUS_EMBEDDING_MODEL")
    # Vector size asked of the model (OpenAI ``dimensions``, Gemini ``output_dimensionality``):
    # 256 keeps the in-process search fast and the vectors small; 0 = the model's own size.
    embedding_dimensions: int = Field(
        default=256, ge=0, le=4096, validation_alias="CHORUS_EMBEDDING_DIMENSIONS"
    )
    embedding_deadline: float = Field(
        default=0.3, gt=0, le=10, validation_alias="CHORUS_EMBEDDING_DEADLINE"
    )
    embedding_timeout: float = Field(
        default=20.0, gt=0, le=300, validation_alias="CHORUS_EMBEDDING_TIMEOUT"
    )
    recall_weight: float = Field(default=0.7, ge=0, le=1, validation_alias="CHORUS_RECALL_WEIGHT")
    recall_floor: float = Field(default=0.2, ge=0, lt=1, validation_alias="CHORUS_RECALL_FLOOR")
    recall_threshold: float = Field(
        default=0.15, ge=0, le=1, validation_alias="CHORUS_RECALL_THRESHOLD"
    )
    # The knowledge base (bot/knowledge/): files, folders or URLs, comma-separated.
    knowledge_paths: str = Field(default="", validation_alias="CHORUS_KNOWLEDGE_PATHS")
    knowledge_chars: int = Field(
        default=700, ge=0, le=20_000, validation_alias="CHORUS_KNOWLEDGE_CHARS"
    )
    knowledge_chunk_chars: int = Field(
        default=600, ge=200, le=4000, validation_alias="CHORUS_KNOWLEDGE_CHUNK_CHARS"
    )
    knowledge_refresh: float = Field(
        default=300.0, ge=5, validation_alias="CHORUS_KNOWLEDGE_REFRESH"
    )
    # What a folder may lead to (bot/knowledge/files.py) and what one base may hold: a docs
    # folder is often synced from a repository anyone can send changes to.
    knowledge_follow_symlinks: bool = Field(
        default=False, validation_alias="CHORUS_KNOWLEDGE_FOLLOW_SYMLINKS"
    )
    knowledge_max_files: int = Field(
        default=1000, ge=1, validation_alias="CHORUS_KNOWLEDGE_MAX_FILES"
    )
    knowledge_max_bytes: int = Field(
        default=20_000_000, ge=1024, validation_alias="CHORUS_KNOWLEDGE_MAX_BYTES"
    )
    knowledge_pdf_timeout: float = Field(
        default=30.0, gt=0, le=600, validation_alias="CHORUS_KNOWLEDGE_PDF_TIMEOUT"
    )
    # The knowledge base's exceptions to the private-address block; never the chat's tools'.
    knowledge_fetch_allow: frozenset[str] = Field(
        default=frozenset(), validation_alias=KNOWLEDGE_ALLOW_VARIABLE
    )

    insights_enabled: bool = Field(default=True, validation_alias="CHORUS_INSIGHTS_ENABLED")
    # False when dedicated ``chorus insights`` processes do the work; the bot still enqueues.
    insights_in_process: bool = Field(default=True, validation_alias="CHORUS_INSIGHTS_IN_PROCESS")
    insights_model_name: str | None = Field(default=None, validation_alias="CHORUS_INSIGHTS_MODEL")
    insights_debounce: float = Field(
        default=20.0, ge=0, validation_alias="CHORUS_INSIGHTS_DEBOUNCE"
    )
    insights_max_delay: float = Field(
        default=120.0, ge=0, validation_alias="CHORUS_INSIGHTS_MAX_DELAY"
    )
    insights_user_daily_tokens: int = Field(
        default=30_000, ge=0, validation_alias="CHORUS_INSIGHTS_USER_DAILY_TOKENS"
    )
    insights_channel_daily_tokens: int = Field(
        default=300_000, ge=0, validation_alias="CHORUS_INSIGHTS_CHANNEL_DAILY_TOKENS"
    )
    insights_poll_seconds: float = Field(
        default=2.0, gt=0, le=60, validation_alias="CHORUS_INSIGHTS_POLL"
    )
    insights_history_lines: int = Field(
        default=30, ge=2, le=200, validation_alias="CHORUS_INSIGHTS_HISTORY"
    )
    # The overall deadline of one background model call, retries included (an insights
    # analysis, a day's summary, community notes, an embedding off the reply path): a stuck
    # provider cannot hold a worker's job; past it the work is retried later, as after an outage.
    background_deadline: float = Field(
        default=120.0, gt=0, le=3600, validation_alias="CHORUS_BACKGROUND_MODEL_DEADLINE"
    )

    # Conversation summaries and community memory (bot/memory/summaries.py, insights/summarise.py).
    summaries_enabled: bool = Field(default=True, validation_alias="CHORUS_SUMMARIES")
    summary_ttl_days: int = Field(
        default=30, ge=1, le=3650, validation_alias="CHORUS_SUMMARY_TTL_DAYS"
    )
    summary_chars: int = Field(
        default=700, ge=0, le=20_000, validation_alias="CHORUS_SUMMARY_CHARS"
    )
    summary_threshold: float = Field(default=0.1, ge=0, validation_alias="CHORUS_SUMMARY_THRESHOLD")
    summary_after_lines: int = Field(
        default=20, ge=1, le=350, validation_alias="CHORUS_SUMMARY_AFTER_LINES"
    )
    community_memory: bool = Field(default=False, validation_alias="CHORUS_COMMUNITY_MEMORY")
    community_chars: int = Field(
        default=400, ge=0, le=20_000, validation_alias="CHORUS_COMMUNITY_CHARS"
    )

    @field_validator("knowledge_fetch_allow", mode="before")
    @classmethod
    def _split_allow(cls, value: Any) -> Any:
        return comma_set(value)

    @field_validator("knowledge_fetch_allow")
    @classmethod
    def _check_allow(cls, value: frozenset[str]) -> frozenset[str]:
        Allowlist.parse(value, KNOWLEDGE_ALLOW_VARIABLE)  # raises ValueError naming a bad entry
        return value

    @model_validator(mode="after")
    def _check_delays(self) -> MemorySettings:
        if self.insights_max_delay < self.insights_debounce:
            raise ValueError(
                "CHORUS_INSIGHTS_MAX_DELAY must be at least CHORUS_INSIGHTS_DEBOUNCE "
                f"({self.insights_max_delay:g} < {self.insights_debounce:g})"
            )
        return self

    @property
    def knowledge_sources(self) -> tuple[str, ...]:
        """CHORUS_KNOWLEDGE_PATHS as a list (the deployment's knowledge base; scopes override)."""
        return tuple(part.strip() for part in self.knowledge_paths.split(",") if part.strip())

    @property
    def max_bytes(self) -> int:
        """The byte budget of one stored buffer: its size at the caps with the longest entries."""
        pin_row = len('["","",100,,],') + PIN_TEXT_MAX + SOURCE_MAX + 2 * EPOCH_DIGITS
        rec_row = len('["","",],') + REC_TEXT_MAX + TOOL_MAX + EPOCH_DIGITS
        envelope = len('{"v":1,"z":"","p":[],"r":[]}') + TIMEZONE_MAX
        return envelope + self.pins_max * pin_row + self.recs_max * rec_row

    @property
    def conversation_window(self) -> int:
        """How long a conversation stays in a user's set: as long as its history may live."""
        return max(self.ttl_seconds, self.history_ttl_seconds)

    def insights_model(self, chat_spec: ModelSpec, *, base_url: str | None = None) -> ModelSpec:
        """CHORUS_INSIGHTS_MODEL, or a cheap model of the chat model's vendor.

        An OpenAI-compatible local server (``base_url`` set) serves only its own models, so
        there the chat model itself is used.
        """
        if self.insights_model_name and self.insights_model_name.strip():
            return parse_model_spec(self.insights_model_name, "CHORUS_INSIGHTS_MODEL")
        if chat_spec.provider == "openai" and base_url:
            return chat_spec
        return ModelSpec(chat_spec.provider, INSIGHTS_MODELS[chat_spec.provider])
