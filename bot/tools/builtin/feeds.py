"""``news_headlines``: recent headlines from the RSS / Atom feeds the deployment follows.

This is the "news commentary" idea: the bot can bring up or comment on current news, but only
from feeds an operator chose (``CHORUS_FEEDS``), never from a URL a user supplies. Feeds are
fetched concurrently through the same ``Fetcher`` as ``fetch_page`` (so the SSRF guard, size
cap and deadline apply) and kept for a few minutes in process, so a chatty channel asking for
news every minute costs each feed one request per TTL. A feed that fails is reported in the
answer and the others are still used.

Parsing uses ``defusedxml``: feeds are untrusted XML, and the stdlib parser would expand entity
bombs ("billion laughs"); defusedxml refuses entity declarations and external references.
"""

from __future__ import annotations

import asyncio
import html
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Annotated
from xml.etree.ElementTree import Element, ParseError

import defusedxml
import defusedxml.ElementTree as SafeET
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


def _text(element: Element | None) -> str:
    if element is None:
        return ""
    return _SPACE.sub(" ", "".join(element.itertext())).strip()


def _plain(markup: str) -> str:
    """Feed summaries often carry escaped HTML; keep a short plain-text start of it."""
    text = _SPACE.sub(" ", html.unescape(_TAGS.sub(" ", markup))).strip()
    return text if len(text) <= _SUMMARY_CHARS else text[: _SUMMARY_CHARS - 3].rstrip() + "..."


def _date(text: str) -> datetime | None:
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)  # Atom, dc:date (RFC 3339)
    except ValueError:
        try:
            moment = parsedate_to_datetime(text)  # RSS 2.0 (RFC 822)
        except (TypeError, ValueError, IndexError):
            return None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _child(item: Element, *names: str) -> Element | None:
    for name in names:
        for child in item:
            if _local(child.tag) == name:
                return child
    return None


def _link(item: Element) -> str:
    links = [child for child in item if _local(child.tag) == "link"]
    for link in links:  # Atom: <link rel="alternate" href="..."/>; rel defaults to alternate
        if link.get("href") and link.get("rel", "alternate") == "alternate":
            return link.get("href", "").strip()
    for link in links:  # RSS: <link>https://...</link>
        if _text(link):
            return _text(link)
    guid = _child(item, "guid", "id")
    value = _text(guid)
    return value if value.startswith(("http://", "https://")) else ""


def parse_feed(data: bytes, feed_url: str) -> list[Headline]:
    """Items of an RSS 2.0, RSS 1.0 (RDF) or Atom document, in document order.

    Raises ``ToolError`` for a document that is not well-formed, uses entities or a DTD with
    external references, or is not a feed.
    """
    try:
        root = SafeET.fromstring(data)
    except defusedxml.DefusedXmlException as exc:
        raise ToolError(f"refused unsafe XML ({type(exc).__name__})") from None
    except ParseError as exc:
        raise ToolError(f"not well-formed XML ({exc})") from None
    kind = _local(root.tag)
    if kind not in ("rss", "rdf", "feed"):
        raise ToolError(f"not an RSS or Atom feed (root element <{kind}>)")
    channel = _child(root, "channel") if kind != "feed" else root
    source = _text(_child(channel, "title")) if channel is not None else ""
    source = source or (URL(feed_url).host or feed_url)
    headlines = []
    for item in root.iter():
        if _local(item.tag) not in ("item", "entry"):
            continue
        title = _text(_child(item, "title"))
        link = _link(item)
        if not title and not link:
            continue
        published = _date(_text(_child(item, "pubdate", "published", "updated", "date")))
        summary = _plain(_text(_child(item, "description", "summary", "content")))
        headlines.append(Headline(title or link, link, published, source, summary))
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
                entry = _Cached(now, parse_feed(page.body, page.url), None)
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
