"""What a message in one scope gets, as text: ``chorus config --scope`` prints it and the
dashboard's settings page shows it (one resolution, one wording).

Each value comes with where it came from (a scope's line in ``chorus.toml``, the deployment's
source, or the default), then the safety rules in force there, then every setting of the
deployment with its source; secrets are masked. It lives beside the router's scoping because it
explains the same resolution the router applies to each message.
"""

from __future__ import annotations

import contextlib
from typing import Any

from bot.settings import ConfigError, Settings
from bot.settings.scopes import DEFAULT_PERSONA, DEPLOYMENT, Resolved, parse_match, resolve
from bot.state.connect import mask_url

# Not listed under "All settings": the loader's bookkeeping, and what the scope part shows.
HIDDEN = {"file": {"found", "given", "lines", "prompt_texts", "persona", "scopes"}}


def mask_secret(value: str | None) -> str:
    """A secret as shown: whether it is set, and its last four characters when it is long."""
    if not value:
        return "(not set)"
    return f"set, ****{value[-4:]}" if len(value) >= 12 else "set, ****"


def describe_scope(settings: Settings, text: str) -> str:
    """``chorus config --scope discord:GUILD/CHANNEL``: what a message there gets, each value
    with where it came from (a scope's line, the deployment's source, or the default), then
    every setting of the deployment with its source. Raises ``ValueError`` for a bad scope."""
    where = parse_match(text)
    channel = where.channel or (where.server if where.platform not in ("discord", "slack") else "")
    resolved = resolve(settings.file.scopes, where.platform, where.server, channel or "")
    scopes = settings.file.scopes
    matching = [f"{scopes[i].match} ({settings.file.where(f'scope.{i}')})" for i in resolved.scopes]
    lines = [f"Scope {text}", f"  {'matching scopes':<36} {', '.join(matching) or '(none)'}"]
    for key, deployment in DEPLOYMENT.items():
        if key in resolved.values:
            index = resolved.origin[key]
            value: Any = resolved.values[key]
            origin = (
                f"{settings.file.where(f'scope.{index}.{key}')} [[scope]] {scopes[index].match}"
            )
        elif deployment is not None:
            section, name = deployment
            value, origin = getattr(getattr(settings, section), name), settings.origin(*deployment)
            if key == "model" and value is None:
                with contextlib.suppress(ConfigError):
                    value = f"{settings.llm.model_spec()} (inferred)"
        elif key == "persona":
            value = DEFAULT_PERSONA
            origin = (
                settings.file.where("persona") if "persona" in settings.file.lines else "default"
            )
        else:
            value = "(the platform's lists)" if key == "engagement.mode" else True
            origin = "default"
        lines.append(f"  {key:<36} {_shown(value):<28} {origin}")
    lines += _effective_safety(settings, where.platform, channel or where.server or "", resolved)
    lines += ["", "All settings (the environment > .env > chorus.toml > defaults)"]
    for section in type(settings).model_fields:
        part = getattr(settings, section)
        for name in type(part).model_fields:
            if name in HIDDEN.get(section, ()):
                continue
            value = getattr(part, name)
            shown = (
                mask_secret(_plain(value)) if settings.is_secret(section, name) else _shown(value)
            )
            lines.append(
                f"  {section + '.' + name:<36} {shown:<28} {settings.origin(section, name)}"
            )
    return "\n".join(lines)


def _effective_safety(
    settings: Settings, platform: str, channel: str, resolved: Resolved
) -> list[str]:
    """What the safety gate applies there: the deployment's rules with the scopes' changes."""
    from bot.events import ConversationKey
    from bot.safety.policy import Policies, describe

    policies = Policies(settings.safety, settings.quota)
    policy = policies.safety_for(
        ConversationKey(platform=platform, channel=channel or "-"),
        policies.scoped(resolved.values),
    )
    lines = ["Effective safety here (the scopes' keys above over the deployment's rules)"]
    lines += [
        f"  {name:<36} {value}" for name, value in describe(policy, model=settings.safety.model)
    ]
    return lines


def _plain(value: Any) -> str | None:
    secret = getattr(value, "get_secret_value", None)
    return secret() if secret is not None else (None if value is None else str(value))


def _shown(value: Any) -> str:
    if value is None:
        return "(not set)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, frozenset | set | tuple | list):
        return ", ".join(sorted(str(item) for item in value)) or "(none)"
    if isinstance(value, dict):
        return ", ".join(sorted(str(key) for key in value)) or "(none)"
    text = str(value)
    return mask_url(text) if "://" in text else text
