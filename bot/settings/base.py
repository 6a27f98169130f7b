"""What every settings section shares: the error type and the model base.

A section is a plain pydantic model, not a ``BaseSettings``: it never reads the environment
itself. ``bot.settings.load_settings`` reads the sources once and validates every section from
that one mapping, so each variable is read the same way wherever it is used. Fields carry the
documented variable as ``validation_alias`` and accept their field name too (``populate_by_name``),
so a future config file can fill a section by field name.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.aliases import AliasChoices


class ConfigError(Exception):
    """A setting is missing or wrong. The message names the variable and how to fix it."""


class Section(BaseModel):
    """One concern's settings; unknown keys are left to the loader's warning."""

    # Each field's docstring is its description: the one text the settings reference
    # (docs/reference/settings.md, ``bot.settings.reference``) shows for its variable. The
    # reference reads the docstrings from the source itself: pydantic's
    # ``use_attribute_docstrings`` would parse every section's source at every start.
    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    @classmethod
    def variables(cls) -> dict[str, str]:
        """Each variable this section reads -> the field it fills."""
        names: dict[str, str] = {}
        for field, info in cls.model_fields.items():
            alias = info.validation_alias
            if isinstance(alias, str):
                names[alias] = field
            elif isinstance(alias, AliasChoices):
                names.update({str(choice): field for choice in alias.choices})
        return names

    @classmethod
    def variable_for(cls, field: str) -> str:
        """The documented name of ``field`` (``A / B`` when it has two)."""
        alias = cls.model_fields[field].validation_alias if field in cls.model_fields else None
        if isinstance(alias, AliasChoices):
            return " / ".join(str(choice) for choice in alias.choices)
        return alias if isinstance(alias, str) else field


def comma_set(value: Any) -> Any:
    """``"a, b,,c"`` -> ``frozenset({"a", "b", "c"})``; other values pass through."""
    if isinstance(value, str):
        return frozenset(item.strip() for item in value.split(",") if item.strip())
    return value


def comma_tuple(value: Any) -> Any:
    """``"a, b, a"`` -> ``("a", "b")``: in order, without repeats; other values pass through."""
    if isinstance(value, str):
        return tuple(dict.fromkeys(item.strip() for item in value.split(",") if item.strip()))
    return value
