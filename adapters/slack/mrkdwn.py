"""Model Markdown -> Slack ``mrkdwn``, with every ping the model could write neutralised.

Slack's ``mrkdwn`` is not Markdown: ``*bold*``, ``_italic_``, ``~strike~``, ``<url|label>``
links, no headings, no nested formatting. And Slack parses ``<...>`` as control sequences
(``<!channel>``, ``<!here>``, ``<!subteam^S1>``, ``<@U1>``), so the only safe model text is text
whose ``&``, ``<`` and ``>`` are escaped as ``&amp;``, ``&lt;``, ``&gt;``, exactly as Slack's
formatting guide requires (https://docs.slack.dev/messaging/formatting-message-text#escaping).

So the conversion escapes *everything* the model wrote, and the only ``<`` that reach Slack are
the ones generated here: links from ``[label](http...)`` and mentions of the users the reply is
addressed to. Code (fenced and inline) is kept; Slack shows ``&lt;`` inside code as ``<``.
Bare ``@here``/``@channel``/``@everyone`` only ping with ``link_names``, which the sender never
sets; a zero-width space after the ``@`` keeps them inert even if someone turns it on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

ZWSP = "\u200b"

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+\-.#]*)\s*$")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)[-*+]\s+(.*)$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_QUOTE = re.compile(r"^(\s*)>\s?(.*)$")

_INLINE_CODE = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]\n]+)\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_AUTOLINK = re.compile(r"<(https?://[^\s<>]+)>")
_SLACK_USER = re.compile(r"<@([UW][A-Z0-9]{2,})(?:\|[^>]*)?>")
_BARE_USER = re.compile(r"(?<![\w<])@([UW][A-Z0-9]{6,})\b")
_BROADCAST = re.compile(r"(?i)(?<![\w])@(here|channel|everyone)\b")

_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC_STAR = re.compile(r"(?<![*\w])\*(?=[^\s*])(.+?)(?<=[^\s*])\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")

# Placeholders are private-use characters the input is stripped of, so model text cannot forge
# one; the escape step never touches them.
_PH_OPEN, _PH_CLOSE = "\ue000", "\ue001"
_BOLD_MARK = "\ue002"
_PH = re.compile(f"{_PH_OPEN}(\\d+){_PH_CLOSE}")
_PRIVATE = re.compile("[\ue000-\ue002]")

_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def escape(text: str) -> str:
    """Slack's three required escapes; after this no ``<...>`` control sequence remains."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(text: str, mention_ids: Iterable[str] = ()) -> str:
    """Convert model Markdown to Slack mrkdwn; only ``mention_ids`` may become real mentions."""
    allowed = frozenset(mention_ids)
    text = _PRIVATE.sub("", text.replace("\r\n", "\n"))
    out: list[str] = []
    fence: str | None = None
    for line in text.split("\n"):
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)
            out.append(match.group(1) + "```")  # Slack shows a language tag as code: drop it
            continue
        if fence is not None:
            if match and match.group(2).startswith(fence[0]) and not match.group(3):
                fence = None
                out.append(match.group(1) + "```")
            else:
                out.append(escape(line))
            continue
        out.append(_block_line(line, allowed))
    if fence is not None:
        out.append("```")
    return "\n".join(out)


def _block_line(line: str, allowed: frozenset[str]) -> str:
    if match := _HEADING.match(line):
        inner = _inline(match.group(1), allowed, bold_context=True)
        return f"*{inner}*" if inner else ""
    if _RULE.match(line):
        return "──────────"
    if match := _BULLET.match(line):
        return f"{match.group(1)}• {_inline(match.group(2), allowed)}"
    if match := _QUOTE.match(line):
        # A literal '>' starts a quote in mrkdwn; it cannot close a control sequence because
        # every '<' of the model's text is escaped.
        return f"{match.group(1)}>{' ' if match.group(2) else ''}{_inline(match.group(2), allowed)}"
    return _inline(line, allowed)


def _inline(text: str, allowed: frozenset[str], *, bold_context: bool = False) -> str:
    saved: list[str] = []

    def keep(value: str) -> str:
        saved.append(value)
        return f"{_PH_OPEN}{len(saved) - 1}{_PH_CLOSE}"

    text = _INLINE_CODE.sub(lambda m: keep(f"`{escape(m.group(2))}`"), text)
    text = _LINK.sub(lambda m: keep(_link(m.group(2), m.group(1))), text)
    text = _AUTOLINK.sub(lambda m: keep(_link(m.group(1), None)), text)
    text = _SLACK_USER.sub(
        lambda m: keep(f"<@{m.group(1)}>") if m.group(1) in allowed else m[0], text
    )
    text = _BARE_USER.sub(
        lambda m: keep(f"<@{m.group(1)}>") if m.group(1) in allowed else m[0], text
    )
    text = _BROADCAST.sub(lambda m: f"@{ZWSP}{m.group(1)}", text)
    text = escape(text)
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC_STAR.sub(lambda m: f"_{m.group(1)}_", text)
    text = _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    text = text.replace(_BOLD_MARK, "" if bold_context else "*")
    return _PH.sub(lambda m: saved[int(m.group(1))], text)


def _link(url: str, label: str | None) -> str:
    """``<url|label>``; a URL Slack should not open (javascript:, relative) stays plain text."""
    if not url.lower().startswith(_SAFE_SCHEMES):
        return escape(f"{label} ({url})" if label else url)
    # '|' and '>' would end the URL part early; percent-encode them.
    safe_url = escape(url.replace("|", "%7C"))
    if not label or label == url:
        return f"<{safe_url}>"
    # Markdown emphasis markers inside a label would show literally; drop them.
    clean = re.sub(r"(\*\*|__|~~|`)", "", label)
    return f"<{safe_url}|{escape(clean)}>"
