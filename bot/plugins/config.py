"""A plugin's own settings: a pydantic model it declares, filled from ``chorus.toml``.

A plugin marks one model with ``@settings``; its values come from ``[plugins.NAME]`` and, per
place, from ``[scope.plugins.NAME]`` tables of the scopes that match (least specific first, each
key of a more specific scope over the one before, as every other scoped setting). A field
declared with ``secret("VARIABLE")`` is read from that variable (the environment, then
``.env``), never from the file: a secret in a shared, committed file is the mistake this
prevents, so the file's value for it is an error.

Checked when the plugin loads and again at ``chorus reload``, with the file's own rules: an
unknown key names the closest valid one, a bad value its ``chorus.toml:LINE``, all of them in
one ``ConfigError``. What a plugin reads at run time was checked already; only a combination of
several scopes' values can still fail its model, and that place then gets the plugin's
``[plugins.NAME]`` values (logged once).
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, Field, SecretStr, ValidationError

from bot.settings import ConfigError, FileSettings
from bot.settings.scopes import Scope

log = logging.getLogger("chorus.plugins")

M = TypeVar("M", bound=BaseModel)
MARK = "__chorus_plugin_settings__"
ENV = "chorus_env"  # the json_schema_extra key naming a secret's variable
Variables = Callable[[str], str | None]


def settings(model: type[M]) -> type[M]:
    """``@settings`` on a pydantic model: the plugin's settings, ``[plugins.NAME]`` in the file;
    a handler reads them with ``ctx.settings(Model)`` (resolved for the message's place)."""
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError("@settings goes on a pydantic model (class X(BaseModel): ...)")
    setattr(model, MARK, True)
    return model


def secret(variable: str, *, description: str | None = None) -> Any:
    """A field read from the environment variable ``variable`` (or ``.env``), never from the
    file; type it ``SecretStr | None`` so it is masked wherever it is shown."""
    if not variable or not variable.replace("_", "").isalnum():
        raise ValueError(f"secret({variable!r}): name an environment variable (A-Z, 0-9, _)")
    return Field(default=None, description=description, json_schema_extra={ENV: variable})


def is_settings_model(value: object) -> bool:
    return isinstance(value, type) and issubclass(value, BaseModel) and MARK in vars(value)


def secret_variables(model: type[BaseModel]) -> dict[str, str]:
    """Each secret field of ``model`` -> the variable it is read from."""
    found = {}
    for name, info in model.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and isinstance(extra.get(ENV), str):
            found[name] = str(extra[ENV])
    return found


class PluginConfig:
    """One plugin's checked settings: the deployment's, and each place's on request."""

    def __init__(
        self,
        plugin: str,
        model: type[BaseModel],
        base: BaseModel,
        table: Mapping[str, Any],
        scoped: tuple[tuple[Scope, Mapping[str, Any]], ...],
        secrets: Mapping[str, str],
    ) -> None:
        self.plugin = plugin
        self.model = model
        self.base = base
        self._table = dict(table)  # [plugins.NAME] with the secrets read
        self._scoped = scoped
        self._secrets = dict(secrets)  # field -> variable
        self._cache: dict[tuple[int, ...], BaseModel] = {(): base}

    def at(self, platform: str, server: str | None, channel: str) -> BaseModel:
        """The settings for one place: the matching scopes' values over the deployment's."""
        matched = sorted(
            (
                i
                for i, (scope, _) in enumerate(self._scoped)
                if scope.where.matches(platform, server, channel)
            ),
            key=lambda i: self._scoped[i][0].where.level,
        )
        found = self._cache.get(tuple(matched))
        if found is not None:
            return found
        values = dict(self._table)
        for index in matched:
            values.update(self._scoped[index][1])
        try:
            found = self.model.model_validate(values)
        except ValidationError as exc:
            log.error(
                "plugin settings: these scopes together do not validate; using [plugins.NAME]",
                extra={"plugin": self.plugin, "error": str(exc).splitlines()[0]},
            )
            found = self.base
        self._cache[tuple(matched)] = found
        return found

    def secret_values(self) -> list[str]:
        """The secrets' values, for the log's masking."""
        values = []
        for name in self._secrets:
            value = getattr(self.base, name, None)
            text = value.get_secret_value() if isinstance(value, SecretStr) else value
            if isinstance(text, str) and text:
                values.append(text)
        return values

    def shown(self) -> dict[str, str]:
        """Each setting as text for ``chorus plugins info``; secrets masked."""
        out = {}
        for name in self.model.model_fields:
            value = getattr(self.base, name)
            if name in self._secrets or isinstance(value, SecretStr):
                state = "set" if value else "not set"
                variable = self._secrets.get(name)
                out[name] = f"*** ({variable}, {state})" if variable else f"*** ({state})"
            else:
                out[name] = repr(value)
        return out


def build_config(
    plugin: str, model: type[BaseModel], file: FileSettings, variables: Variables
) -> PluginConfig:
    """Check ``[plugins.NAME]`` and every ``[scope.plugins.NAME]`` against ``model``; one
    ``ConfigError`` lists every problem with its line."""
    problems: list[str] = []
    secrets = secret_variables(model)
    table = dict(file.plugins.get(plugin, {}))
    here = f"plugins.{plugin}"
    problems += _keys(model, table, secrets, file, here, "")
    for name, variable in secrets.items():
        text = variables(variable)
        if text:
            table[name] = text
    base = _validated(model, table, file, here, "", problems)
    scoped = []
    for index, scope in enumerate(file.scopes):
        own = (scope.plugins or {}).get(plugin)
        if own is None:
            continue
        where = f"scope.{index}.plugins.{plugin}"
        label = f"[[scope]] {scope.match!r}: "
        if not isinstance(own, dict):
            problems.append(f"{file.where(where)}: {label}plugins.{plugin}: must be a table")
            continue
        problems += _keys(model, own, secrets, file, where, label)
        _validated(model, {**table, **own}, file, where, label, problems)
        scoped.append((scope, {k: v for k, v in own.items() if k not in secrets}))
    if problems or base is None:
        raise ConfigError("invalid plugin settings:\n  " + "\n  ".join(problems))
    return PluginConfig(plugin, model, base, table, tuple(scoped), secrets)


def _keys(
    model: type[BaseModel],
    table: Mapping[str, Any],
    secrets: Mapping[str, str],
    file: FileSettings,
    where: str,
    label: str,
) -> list[str]:
    known = [name for name in model.model_fields if name not in secrets]
    problems = []
    for key in table:
        at = f"{file.where(f'{where}.{key}')}: {label}{_shown(where)}.{key}"
        if key in secrets:
            problems.append(
                f"{at}: is a secret: set {secrets[key]} in the environment or .env, not in the file"
            )
        elif key not in model.model_fields:
            close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else f"valid keys: {', '.join(known)}"
            problems.append(f"{at}: unknown key; {hint}")
    return problems


def _shown(where: str) -> str:
    """``plugins.NAME`` of ``plugins.NAME`` or ``scope.3.plugins.NAME``."""
    return where[where.index("plugins.") :]


def _validated(
    model: type[BaseModel],
    values: Mapping[str, Any],
    file: FileSettings,
    where: str,
    label: str,
    problems: list[str],
) -> BaseModel | None:
    clean = {key: value for key, value in values.items() if key in model.model_fields}
    try:
        return model.model_validate(clean)
    except ValidationError as exc:
        for error in exc.errors():
            key = ".".join(str(part) for part in error["loc"])
            message = str(error["msg"]).removeprefix("Value error, ")
            at = file.where(f"{where}.{key}" if key else where)
            name = f"{_shown(where)}.{key}" if key else _shown(where)
            problems.append(f"{at}: {label}{name}: {message}")
        return None
