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
    """Pins (facts and preferences) kept per user."""
    recs_max: int = Field(default=10, ge=0, le=100, validation_alias="CHORUS_RECS_MAX")
    """Recommendations kept per user."""
    ttl_seconds: int = Field(default=30 * 24 * 3600, ge=60, validation_alias="CHORUS_MEMORY_TTL")
    """Seconds a user's memory lives after their last activity."""
    history_ttl_seconds: int = Field(
        default=7 * 24 * 3600, ge=60, validation_alias="CHORUS_HISTORY_TTL"
    )
    """Seconds a conversation's history lives after its last message (the same variable as the state
    section's)."""
    prompt_pins: int = Field(default=2, ge=0, le=20, validation_alias="CHORUS_PROMPT_PINS")
    """Pins per prompt at most."""
    prompt_recs: int = Field(default=1, ge=0, le=20, validation_alias="CHORUS_PROMPT_RECS")
    """Recommendations per prompt at most."""
    pin_threshold: float = Field(default=0.1, ge=0, validation_alias="CHORUS_PIN_THRESHOLD")
    """Minimum relevance of a pin to reach the prompt."""
    rec_threshold: float = Field(default=0.05, ge=0, validation_alias="CHORUS_REC_THRESHOLD")
    """Minimum relevance of a recommendation to reach the prompt."""
    context_chars: int = Field(
        default=800, ge=300, le=20_000, validation_alias="CHORUS_CONTEXT_CHARS"
    )
    """Character budget of the context block."""

    # Semantic recall (bot/memory/recall.py): empty = lexical relevance only.
    embedding_model: str = Field(default="", validation_alias="CHORUS_EMBEDDING_MODEL")
    """An embedding model as `provider:model` (`openai:text-embedding-3-small`, `gemini:text-
    embedding-004`, or `openai:<name>` of an OpenAI-compatible server); key and base URL are the
    vendor's chat settings. Empty: relevance is lexical only."""
    # Vector size asked of the model (OpenAI ``dimensions``, Gemini ``output_dimensionality``):
    # 256 keeps the in-process search fast and the vectors small; 0 = the model's own size.
    embedding_dimensions: int = Field(
        default=256, ge=0, le=4096, validation_alias="CHORUS_EMBEDDING_DIMENSIONS"
    )
    """Vector size asked of the embedding model (0: its own size; set 0 for a server that rejects
    the option)."""
    embedding_deadline: float = Field(
        default=0.3, gt=0, le=10, validation_alias="CHORUS_EMBEDDING_DEADLINE"
    )
    """Seconds the reply waits for the message's embedding; late or failed, that turn uses lexical
    relevance."""
    embedding_timeout: float = Field(
        default=20.0, gt=0, le=300, validation_alias="CHORUS_EMBEDDING_TIMEOUT"
    )
    """Seconds per embedding request off the reply path (notes, knowledge chunks,
    `search_knowledge`)."""
    recall_weight: float = Field(default=0.7, ge=0, le=1, validation_alias="CHORUS_RECALL_WEIGHT")
    """Hybrid score: the weight of the cosine (1: the embedding alone)."""
    recall_floor: float = Field(default=0.2, ge=0, lt=1, validation_alias="CHORUS_RECALL_FLOOR")
    """Hybrid score: the cosine counted as unrelated."""
    recall_threshold: float = Field(
        default=0.15, ge=0, le=1, validation_alias="CHORUS_RECALL_THRESHOLD"
    )
    """The hybrid score a note or chunk needs to reach the prompt."""
    # The knowledge base (bot/knowledge/): files, folders or URLs, comma-separated.
    knowledge_paths: str = Field(default="", validation_alias="CHORUS_KNOWLEDGE_PATHS")
    """The deployment's knowledge base: files, folders (`.md`, `.markdown`, `.txt`, `.rst`, `.pdf`)
    or http(s) URLs, comma-separated (a scope's `knowledge = [...]` overrides it there)."""
    knowledge_chars: int = Field(
        default=700, ge=0, le=20_000, validation_alias="CHORUS_KNOWLEDGE_CHARS"
    )
    """Characters of knowledge excerpts per prompt."""
    knowledge_chunk_chars: int = Field(
        default=600, ge=200, le=4000, validation_alias="CHORUS_KNOWLEDGE_CHUNK_CHARS"
    )
    """The largest chunk a knowledge document is cut into, in characters."""
    knowledge_refresh: float = Field(
        default=300.0, ge=5, validation_alias="CHORUS_KNOWLEDGE_REFRESH"
    )
    """Seconds between checks of the knowledge sources for changes (`chorus reload` checks at once).
    """
    # What a folder may lead to (bot/knowledge/files.py) and what one base may hold: a docs
    # folder is often synced from a repository anyone can send changes to.
    knowledge_follow_symlinks: bool = Field(
        default=False, validation_alias="CHORUS_KNOWLEDGE_FOLLOW_SYMLINKS"
    )
    """`true` follows a symlink inside a knowledge folder when its target stays inside the folder
    (never one leading out); `false` skips every symlink."""
    knowledge_max_files: int = Field(
        default=1000, ge=1, validation_alias="CHORUS_KNOWLEDGE_MAX_FILES"
    )
    """Documents one knowledge base holds at most."""
    knowledge_max_bytes: int = Field(
        default=20_000_000, ge=1024, validation_alias="CHORUS_KNOWLEDGE_MAX_BYTES"
    )
    """Bytes of files and pages one knowledge base holds at most."""
    knowledge_pdf_timeout: float = Field(
        default=30.0, gt=0, le=600, validation_alias="CHORUS_KNOWLEDGE_PDF_TIMEOUT"
    )
    """Seconds to extract the text of one PDF (in a child process, stopped when the time is up)."""
    # The knowledge base's exceptions to the private-address block; never the chat's tools'.
    knowledge_fetch_allow: frozenset[str] = Field(
        default=frozenset(), validation_alias=KNOWLEDGE_ALLOW_VARIABLE
    )
    """Comma list of hosts, `host:port` or CIDRs the knowledge base may read despite the private-
    address block (an internal wiki); `CHORUS_FETCH_ALLOW` does not apply here."""

    insights_enabled: bool = Field(default=True, validation_alias="CHORUS_INSIGHTS_ENABLED")
    """The insights agent, which keeps each user's pins and recommendations up to date."""
    # False when dedicated ``chorus insights`` processes do the work; the bot still enqueues.
    insights_in_process: bool = Field(default=True, validation_alias="CHORUS_INSIGHTS_IN_PROCESS")
    """Run the insights agent inside the bot; `false` when `chorus insights` runs it as its own
    process."""
    insights_model_name: str | None = Field(default=None, validation_alias="CHORUS_INSIGHTS_MODEL")
    """`provider:model` of the insights agent; unset: a cheap model of the chat vendor."""
    insights_debounce: float = Field(
        default=20.0, ge=0, validation_alias="CHORUS_INSIGHTS_DEBOUNCE"
    )
    """Seconds of quiet before an analysis."""
    insights_max_delay: float = Field(
        default=120.0, ge=0, validation_alias="CHORUS_INSIGHTS_MAX_DELAY"
    )
    """The longest an analysis waits, in seconds."""
    insights_user_daily_tokens: int = Field(
        default=30_000, ge=0, validation_alias="CHORUS_INSIGHTS_USER_DAILY_TOKENS"
    )
    """Daily analysis budget per user, in tokens."""
    insights_channel_daily_tokens: int = Field(
        default=300_000, ge=0, validation_alias="CHORUS_INSIGHTS_CHANNEL_DAILY_TOKENS"
    )
    """Daily analysis budget per channel, in tokens."""
    insights_poll_seconds: float = Field(
        default=2.0, gt=0, le=60, validation_alias="CHORUS_INSIGHTS_POLL"
    )
    """Seconds between checks of the insights queue."""
    insights_history_lines: int = Field(
        default=30, ge=2, le=200, validation_alias="CHORUS_INSIGHTS_HISTORY"
    )
    """History lines per analysis."""
    # The overall deadline of one background model call, retries included (an insights
    # analysis, a day's summary, community notes, an embedding off the reply path): a stuck
    # provider cannot hold a worker's job; past it the work is retried later, as after an outage.
    background_deadline: float = Field(
        default=120.0, gt=0, le=3600, validation_alias="CHORUS_BACKGROUND_MODEL_DEADLINE"
    )
    """Seconds one background model call (an analysis, a summary, community notes, an embedding off
    the reply path) may take overall, retries included, before it is retried later."""

    # Conversation summaries and community memory (bot/memory/summaries.py, insights/summarise.py).
    summaries_enabled: bool = Field(default=True, validation_alias="CHORUS_SUMMARIES")
    """Conversation summaries: what leaves the history window is folded into one summary per
    conversation and day."""
    summary_ttl_days: int = Field(
        default=30, ge=1, le=3650, validation_alias="CHORUS_SUMMARY_TTL_DAYS"
    )
    """Days a conversation summary (and community notes) are kept."""
    summary_chars: int = Field(
        default=700, ge=0, le=20_000, validation_alias="CHORUS_SUMMARY_CHARS"
    )
    """Summary characters per prompt."""
    summary_threshold: float = Field(default=0.1, ge=0, validation_alias="CHORUS_SUMMARY_THRESHOLD")
    """Relevance a summary needs to reach the prompt."""
    summary_after_lines: int = Field(
        default=20, ge=1, le=350, validation_alias="CHORUS_SUMMARY_AFTER_LINES"
    )
    """Lines out of the history window before a summary is written."""
    community_memory: bool = Field(default=False, validation_alias="CHORUS_COMMUNITY_MEMORY")
    """Per-channel notes on recurring topics, norms and in-jokes, and a mood."""
    community_chars: int = Field(
        default=400, ge=0, le=20_000, validation_alias="CHORUS_COMMUNITY_CHARS"
    )
    """Community note characters per prompt."""

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
