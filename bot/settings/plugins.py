"""Which plugins the bot loads: ``CHORUS_PLUGINS``, and the ``chorus.plugins`` entry points
when CHORUS_PLUGIN_ENTRY_POINTS=true.

Only names and limits live here; ``bot.plugins.loader`` imports the modules. A config file's
top-level ``plugins = [...]`` fills ``modules`` by field name, and the variable, when set, wins
over it like every other variable.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from bot.settings.base import Section, comma_tuple


class PluginSettings(Section):
    modules: tuple[str, ...] = Field(default=(), validation_alias="CHORUS_PLUGINS")
    """Comma list of plugin modules (`module` or `module:register`) or installed entry-point names.
    """
    # Installed entry points load only when asked for (or named in ``modules``): a package on
    # the path is not an operator's decision to run it inside the bot.
    entry_points: bool = Field(default=False, validation_alias="CHORUS_PLUGIN_ENTRY_POINTS")
    """`true`: also load every installed package's `chorus.plugins` entry point (else only those
    named in `CHORUS_PLUGINS`)."""
    hook_timeout: float = Field(
        default=5.0, gt=0, le=120, validation_alias="CHORUS_PLUGIN_HOOK_TIMEOUT"
    )
    """Seconds a plugin's `before_turn` / `after_reply` hook may take."""
    event_concurrency: int = Field(
        default=8, ge=1, le=1000, validation_alias="CHORUS_PLUGIN_EVENT_CONCURRENCY"
    )
    """Event handlers (`on_message`...) one plugin may have running at once; past it, events for
    that plugin are dropped and counted."""

    @field_validator("modules", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        return comma_tuple(value)

    @field_validator("modules")
    @classmethod
    def _check(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            module, _, attr = name.partition(":")
            dotted = [*module.split("."), *(attr.split(".") if attr else [])]
            if not all(part.isidentifier() for part in dotted):
                raise ValueError(
                    f"{name!r} is not a module name (write package.module or package.module:func)"
                )
        return value
