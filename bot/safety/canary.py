"""The system prompt's canary and the check that an answer does not reproduce system text.

An obedient model asked to print its instructions repeats them. Two tripwires stop that answer
on its way out:

- the canary: a token at the end of the system text (``prompts/safety/canary``) that nothing
  but a copy of the system text can contain. It must not break the prompt cache, so it is not
  random per turn: it is an HMAC of the bot's name keyed by ``CHORUS_SAFETY_CANARY_SECRET`` (or,
  when that is unset, by the deployment's model keys), the same in every worker and every
  restart of one deployment, different between deployments, and not guessable by a chatter.
- verbatim overlap: ``SHINGLE`` consecutive words of the system text, ``MIN_HITS`` times (ten
  words in a row, or three separate eight-word phrases). A paraphrase of the rules ("you can
  use /pins") passes; a pasted paragraph does not.
"""

from __future__ import annotations

import hashlib
import hmac
import re

import prompts
from bot.safety.rules import Flag
from bot.settings import LLMSettings, SafetySettings

SHINGLE = 8
MIN_HITS = 3
_WORD = re.compile(r"\w+")


def canary_token(secret: str, bot_name: str) -> str:
    """The deployment's canary: stable for one secret and name, unguessable without the secret."""
    digest = hmac.new(secret.encode(), f"chorus-canary:{bot_name}".encode(), hashlib.sha256)
    return f"cx-{digest.hexdigest()[:20]}"


def deployment_secret(safety: SafetySettings, llm: LLMSettings) -> str:
    """The deployment's secret: ``CHORUS_SAFETY_CANARY_SECRET``, else the model keys joined
    (the same in every worker of one deployment; ``""`` when there is neither). The canary and
    the audit trail's fingerprint key (``bot.safety.audit.fingerprint_key``) derive from it."""
    secret = safety.canary_secret.get_secret_value() if safety.canary_secret else ""
    return secret or "|".join(sorted(llm.secret_values()))


def deployment_canary(safety: SafetySettings, llm: LLMSettings, bot_name: str) -> str | None:
    """The canary of this deployment, or None when ``CHORUS_SAFETY_CANARY=false``."""
    if not safety.canary:
        return None
    return canary_token(deployment_secret(safety, llm), bot_name)


def with_canary(system: str, canary: str | None) -> str:
    """``system`` with the canary line appended (unchanged without a canary)."""
    if not canary:
        return system
    return f"{system}\n\n{prompts.render('safety/canary', canary=canary)}"


def _shingles(text: str) -> list[int]:
    words = _WORD.findall(text.casefold())
    return [hash(tuple(words[i : i + SHINGLE])) for i in range(len(words) - SHINGLE + 1)]


class LeakCheck:
    """Does an answer carry the canary or copy the system text?"""

    def __init__(self, system: str, canary: str | None) -> None:
        self.canary = canary
        self._system = frozenset(_shingles(system))

    def find(self, answer: str) -> Flag | None:
        if self.canary and self.canary in answer:
            return Flag("canary", "system prompt canary")
        hits = 0
        for shingle in _shingles(answer):
            if shingle in self._system:
                hits += 1
                if hits >= MIN_HITS:
                    return Flag("system_leak", f"{SHINGLE}-word overlap")
        return None
