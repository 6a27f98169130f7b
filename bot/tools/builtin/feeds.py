"""``news_headlines``: recent headlines from the RSS / Atom feeds the deployment follows.

This is the "news commentary" idea: the bot can bring up or comment on current news, but only
from feeds an operator chose (``CHORUS_FEEDS``), never from a URL a user supplies. Feeds are
fetched concurrently through the same ``Fetcher`` as ``fetch_page`` (so the SSRF guard, size
cap and deadline apply) and kept for a few minutes in process, so a chatty channel asking for
news every minute costs each feed one request per TTL. A feed that fails is reported in the
answer and the others are still used.

Parsing is ``feedparser``'s (RSS 0.9x, 1.0 and 2.0, Atom, their dates, relative links made
absolute against the feed's URL, summaries' HTML sanitised), behind a ``defusedxml`` check: feeds
are untrusted XML, and a document that is not well-formed, declares entities (an entity bomb,
"billion laughs") or references external ones is refused before feedparser sees it. feedparser is
only handed the bytes already fetched (a ``BytesIO``, never a URL or a path, which it would
open), so it fetches nothing and reads no file. It is pure Python and slow on a large feed, so
the parse runs in a worker thread: the other conversations keep being answered meanwhile.
"""

from __future__ import annotations

import asyncio
import calendar
import html
import io
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any
from xml.etree.ElementTree import ParseError

import defusedxml
import defusedxml.ElementTree as SafeET
import feedparser
from pydantic import Field
from yarl import URL

from bot.tools.base import ToolError
from bot.tools.builtin.fetch import Fetcher
from bot.tools.function import FunctionTool

log = logging.getLogger("chorus.tools.feeds")

FEED_ACCEPT = (
    "application/rss+xml, application/atom+xml, application/xml;q=0.9, text/xml;q=0.9, */*;q=0.5"
)
_TAGS = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")
_SUMMARY_CHARS = 200


@dataclass(frozen=True)
class Headline:
    title: str
    link: str
    published: datetime | None
    source: str
    summary: str = ""


def _local(tag: object) -> str:
    """The tag name without its ``{namespace}``."""
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def _line(text: object) -> str:
    return _SPACE.sub(" ", text).strip() if isinstance(text, str) else ""


def _plain(markup: str) -> str:
    """Feed summaries often carry HTML; keep a short plain-text start of it."""
    text = _SPACE.sub(" ", html.unescape(_TAGS.sub(" ", markup))).strip()
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 3].rstrip() + "..."


def _date(entry: Mapping[str, Any]) -> datetime | None:
    """When the item was published (else updated), in UTC: feedparser's parsed date."""
    moment = entry.get("published_parsed") or entry.get("updated_parsed")
    return datetime.fromtimestamp(calendar.timegm(moment), UTC) if moment else None


def _link(entry: Mapping[str, Any]) -> str:
    """The item's page: its (alternate) link, else an id or guid that is a web address."""
    link = _line(entry.get("link"))
    if link:
        return link
    ident = _line(entry.get("id"))
    return ident if ident.startswith(("http://", "https://")) else ""


def _checked(data: bytes) -> None:
    """Raise ``ToolError`` unless ``data`` is well-formed XML without entity declarations or
    external references whose root is ``rss``, ``rdf:RDF`` or an Atom ``feed``."""
    try:
        root = SafeET.fromstring(data)
    except defusedxml.DefusedXmlException as exc:
        raise ToolError(f"refused unsafe XML ({type(exc).__name__})") from None
    except ParseError as exc:
        raise ToolError(f"not well-formed XML ({exc})") from None
    kind = _local(root.tag)
    if kind not in ("rss", "rdf", "feed"):
        raise ToolError(f"not an RSS or Atom feed (root element <{kind}>)")


def parse_feed(data: bytes, feed_url: str) -> list[Headline]:
    """Items of an RSS 0.9x, 1.0 (RDF) or 2.0 or Atom document, in document order.

    Raises ``ToolError`` for a document that is not well-formed, uses entities or a DTD with
    external references, or is not a feed.
    """
    _checked(data)
    # The type says XML (what was just checked), so the XML declaration names the encoding;
    # the location is the base relative links are resolved against.
    headers = {"content-type": "application/xml", "content-location": feed_url}
    parsed = feedparser.parse(io.BytesIO(data), response_headers=headers)
    source = _line(parsed.feed.get("title")) or URL(feed_url).host or feed_url
    headlines = []
    for entry in parsed.entries:
        title, link = _line(entry.get("title")), _link(entry)
        if not title and not link:
            continue
        content = entry.get("content") or [{}]
        summary = _plain(_line(entry.get("summary")) or _line(content[0].get("value")))
        headlines.append(Headline(title or link, link, _date(entry), source, summary))
    return headlines


@dataclass(frozen=True)
class _Cached:
    at: float
    headlines: list[Headline]
    error: str | None


class FeedReader:
    """Reads the configured feeds concurrently, with an in-process TTL cache per feed."""

    def __init__(
        self,
        feeds: Sequence[str],
        fetcher: Fetcher,
        *,
        ttl: float = 300.0,
        error_ttl: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not feeds:
            raise ValueError("FeedReader needs at least one feed URL")
        self.feeds = tuple(dict.fromkeys(feeds))
        self.fetcher = fetcher
        self.ttl = ttl
        self.error_ttl = error_ttl
        self._clock = clock
        self._cache: dict[str, _Cached] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def read(self) -> tuple[list[Headline], list[tuple[str, str]]]:
        """Every headline of every feed, and ``(feed, problem)`` for each feed that failed."""
        results = await asyncio.gather(*(self._load(url) for url in self.feeds))
        headlines = [h for r in results for h in r.headlines]
        errors = [(url, r.error) for url, r in zip(self.feeds, results, strict=True) if r.error]
        return headlines, errors

    async def _load(self, url: str) -> _Cached:
        # One lock per feed: concurrent callers wait for the same download, then hit the cache.
        async with self._locks.setdefault(url, asyncio.Lock()):
            cached = self._cache.get(url)
            now = self._clock()
            if cached is not None and now - cached.at < (
                self.error_ttl if cached.error else self.ttl
            ):
                return cached
            try:
                page = await self.fetcher.get(url, accept=FEED_ACCEPT)
                headlines = await asyncio.to_thread(parse_feed, page.body, page.url)
                entry = _Cached(now, headlines, None)
            except ToolError as exc:
                entry = _Cached(now, [], str(exc))
            except Exception as exc:
                log.warning("feed failed", extra={"feed": url}, exc_info=True)
                entry = _Cached(now, [], f"{type(exc).__name__}: {exc}")
            if entry.error:
                log.info("feed skipped", extra={"feed": url, "error": entry.error})
            self._cache[url] = entry
            return entry


def select(headlines: list[Headline], topic: str, limit: int) -> list[Headline]:
    """Headlines about ``topic`` (every word must start a word of the title or summary),
    newest first (undated last), one per link."""
    words = [w for w in re.split(r"[\s,;]+", topic.lower()) if w]
    patterns = [re.compile(rf"\b{re.escape(w)}", re.IGNORECASE) for w in words]
    matching = [h for h in headlines if all(p.search(f"{h.title} {h.summary}") for p in patterns)]
    oldest = datetime.min.replace(tzinfo=UTC)
    matching.sort(key=lambda h: (h.published is not None, h.published or oldest), reverse=True)
    seen: set[str] = set()
    chosen: list[Headline] = []
    for headline in matching:
        key = headline.link.split("#", 1)[0].rstrip("/") or headline.title.lower()
        if key not in seen:
            seen.add(key)
            chosen.append(headline)
    return chosen[:limit]


def render(chosen: list[Headline], errors: list[tuple[str, str]], topic: str) -> str:
    lines = []
    if chosen:
        lines.append(f"Headlines{f' about {topic!r}' if topic else ''}, newest first:")
        for n, h in enumerate(chosen, 1):
            when = h.published.strftime("%Y-%m-%d %H:%M UTC") if h.published else "undated"
            lines.append(f"{n}. {h.title} ({h.source}, {when})")
            if h.link:
                lines.append(f"   {h.link}")
            if h.summary:
                lines.append(f"   {h.summary}")
    else:
        about = f" about {topic!r}" if topic else ""
        lines.append(f"No headlines{about} in the followed feeds right now.")
    for url, problem in errors:
        lines.append(f"(skipped feed {url}: {problem})")
    return "\n".join(lines)


def feeds_tool(reader: FeedReader, *, timeout: float | None = None) -> FunctionTool:
    """The ``news_headlines`` tool over ``reader`` (timeout: the fetch deadline + 5 s)."""

    async def news_headlines(topic: str = "", limit: Annotated[int, Field(ge=1, le=20)] = 5) -> str:
        """Get recent news headlines (title, link, date, source) from the news feeds this bot
        follows, newest first, optionally only those about a topic.

        Args:
            topic: keywords the headlines must contain, e.g. "climate" or "world cup"; empty
                for all news.
            limit: how many headlines to return.
        """
        headlines, errors = await reader.read()
        if errors and len(errors) == len(reader.feeds):
            details = "; ".join(f"{url}: {problem}" for url, problem in errors)
            raise ToolError(f"no news feed could be read ({details})")
        return render(select(headlines, topic, limit), errors, topic.strip())

    return FunctionTool(news_headlines, timeout=timeout or reader.fetcher.timeout + 5.0)
