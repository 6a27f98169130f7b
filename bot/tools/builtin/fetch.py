"""``fetch_page``: read a web page a user linked, as plain readable text.

The URL comes from a model, so every hop goes through ``NetGuard`` (see ``netguard.py``):
redirects are followed by hand (at most five) so each new location is checked and pinned before
a byte is sent, only http/https are spoken, the download stops at a size cap (the tail is
dropped, not buffered), and the whole fetch shares one deadline. ``Fetcher`` is also what the
feeds tool uses, so both get the same protection.

Text extraction is deliberately small (stdlib ``html.parser``, no heavy dependency): the title
plus the text of ``<main>``/``<article>`` when the page has one (else the body), without
scripts, styles, navigation, forms and other chrome, with whitespace collapsed. Parsing a page
of a megabyte or two takes hundreds of milliseconds of pure Python, so a page over
``OFF_LOOP_BYTES`` is parsed in a worker thread: every other conversation keeps being answered
meanwhile. Small pages stay on the loop, where a thread hop would cost more than the parse.
"""

from __future__ import annotations

import asyncio
import codecs
import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Annotated

from pydantic import Field
from yarl import URL

from bot.tools.base import ToolError
from bot.tools.function import FunctionTool
from bot.tools.netguard import NetGuard

if TYPE_CHECKING:
    import aiohttp

    from bot.tools.pinned import PinnedResolver

USER_AGENT = "Chorus/0.1 (chat bot; fetches pages its users link)"
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
_TEXT_TYPES = frozenset({"text/plain", "text/markdown", "text/csv", "application/json"})
OFF_LOOP_BYTES = 64 * 1024  # bigger bodies are parsed in a worker thread
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


@dataclass(frozen=True)
class Fetched:
    """A downloaded body. ``truncated`` means the size cap cut it short."""

    url: str
    status: int
    content_type: str
    charset: str | None
    body: bytes
    truncated: bool

    def text(self) -> str:
        return self.body.decode(_codec(self.charset) or _sniff(self.body) or "utf-8", "replace")


def _codec(name: str | None) -> str | None:
    if not name:
        return None
    try:
        return codecs.lookup(name.strip()).name
    except LookupError:
        return None


def _sniff(body: bytes) -> str | None:
    match = _META_CHARSET.search(body[:4096])
    return _codec(match.group(1).decode("ascii")) if match else None


class Fetcher:
    """GETs a URL through the network guard, with a deadline, a size cap and checked redirects.

    One aiohttp session per fetch: fetches are rare (a user linked something), and a session
    per call keeps the pinned resolver's answers scoped to that call and binds no event loop.
    """

    def __init__(
        self,
        guard: NetGuard | None = None,
        *,
        max_bytes: int = 2_000_000,
        timeout: float = 10.0,
        max_redirects: int = 5,
        user_agent: str = USER_AGENT,
    ) -> None:
        self.guard = guard or NetGuard()
        self.max_bytes = max_bytes
        self.timeout = timeout
        self.max_redirects = max_redirects
        self.user_agent = user_agent

    async def get(self, url: str, *, accept: str = "*/*") -> Fetched:
        """Download ``url``; every failure is a ``ToolError`` with a message for the model."""
        try:
            target = URL(url.strip())
        except (ValueError, TypeError):
            raise ToolError(f"{url!r} is not a valid URL") from None
        if target.scheme and target.scheme not in ("http", "https"):
            raise ToolError(f"only http and https URLs can be fetched, not {target.scheme!r}")
        if not target.is_absolute():
            raise ToolError(f"{url!r} is not an absolute http(s) URL")
        import aiohttp  # here, not at the top: most starts never fetch (see bot.tools.pinned)

        from bot.tools.pinned import PinnedResolver

        resolver = PinnedResolver()
        connector = aiohttp.TCPConnector(resolver=resolver, use_dns_cache=False)
        try:
            async with (
                asyncio.timeout(self.timeout),
                aiohttp.ClientSession(
                    connector=connector,
                    trust_env=False,  # a proxy from the environment would bypass the pinning
                    headers={"User-Agent": self.user_agent, "Accept": accept},
                ) as session,
            ):
                return await self._follow(session, resolver, target)
        except TimeoutError:
            raise ToolError(f"fetching {url} timed out after {self.timeout:g} s") from None
        except aiohttp.ClientError as exc:
            raise ToolError(f"could not fetch {url}: {type(exc).__name__}: {exc}") from None

    async def _follow(
        self, session: aiohttp.ClientSession, resolver: PinnedResolver, target: URL
    ) -> Fetched:
        for _ in range(self.max_redirects + 1):
            target = target.with_fragment(None)
            addresses = await self.guard.vet(target)
            resolver.pin(target.raw_host or "", addresses)
            async with session.get(target, allow_redirects=False) as resp:
                if resp.status in _REDIRECTS:
                    location = resp.headers.get("Location")
                    if not location:
                        raise ToolError(f"{target} redirected (HTTP {resp.status}) to nowhere")
                    try:
                        target = target.join(URL(location))
                    except ValueError:
                        raise ToolError(f"{target} redirected to a bad URL {location!r}") from None
                    continue
                if resp.status >= 400:
                    raise ToolError(f"{target} answered HTTP {resp.status} {resp.reason or ''}")
                body, truncated = await self._read(resp)
                return Fetched(
                    url=str(target),
                    status=resp.status,
                    content_type=resp.content_type.lower(),
                    charset=resp.charset,
                    body=body,
                    truncated=truncated,
                )
        raise ToolError(f"too many redirects (more than {self.max_redirects})")

    async def _read(self, resp: aiohttp.ClientResponse) -> tuple[bytes, bool]:
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_chunked(64 * 1024):
            if size + len(chunk) > self.max_bytes:
                chunks.append(chunk[: self.max_bytes - size])
                return b"".join(chunks), True
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks), False


# -- readable text -----------------------------------------------------------------------------
_SKIP = frozenset(
    {
        "script", "style", "noscript", "template", "svg", "math", "nav", "footer", "aside",
        "form", "iframe", "button", "select", "canvas", "object", "dialog",
    }
)  # fmt: skip
_BLOCK = frozenset(
    {
        "p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "h1", "h2", "h3", "h4", "h5", "h6",
        "tr", "table", "section", "article", "main", "header", "blockquote", "pre", "hr",
        "figure", "figcaption", "address", "details", "summary",
    }
)  # fmt: skip
_MAIN = frozenset({"main", "article"})
_WHITESPACE = re.compile(r"\s+")
_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")


class _Readable(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title: list[str] = []
        self.body: list[str] = []
        self.main: list[str] = []
        self._skip = 0
        self._in_title = False
        self._in_main = 0
        self._pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _SKIP:
            self._skip += 1
        elif tag == "title":
            self._in_title = True
        elif tag in _MAIN:
            self._in_main += 1
        elif tag == "pre":
            self._pre += 1
        if tag in _BLOCK:
            self._emit("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in _SKIP:
            self._skip = max(0, self._skip - 1)
        elif tag == "title":
            self._in_title = False
        elif tag in _MAIN:
            self._in_main = max(0, self._in_main - 1)
        elif tag == "pre":
            self._pre = max(0, self._pre - 1)
        if tag in _BLOCK:
            self._emit("\n")

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title.append(data)
        elif not self._skip:
            # Outside <pre>, a line break in the source is just a space (HTML semantics).
            self._emit(data if self._pre else _WHITESPACE.sub(" ", data))

    def _emit(self, text: str) -> None:
        self.body.append(text)
        if self._in_main:
            self.main.append(text)


def _tidy(parts: list[str]) -> str:
    lines = (_SPACES.sub(" ", line).strip() for line in "".join(parts).splitlines())
    return "\n".join(line for line in lines if line)


def readable_text(html: str) -> tuple[str, str]:
    """``(title, text)`` of an HTML document (main content preferred, chrome dropped)."""
    parser = _Readable()
    parser.feed(html)
    parser.close()
    main = _tidy(parser.main)
    return _tidy(parser.title), main or _tidy(parser.body)


def _is_text_type(content_type: str) -> bool:
    return content_type in _TEXT_TYPES or content_type.endswith("+json")


def page_text(page: Fetched, max_chars: int) -> str:
    """What ``fetch_page`` returns for a downloaded page."""
    if page.content_type in _HTML_TYPES:
        title, text = readable_text(page.text())
    elif _is_text_type(page.content_type):
        title, text = "", page.text().strip()
    else:
        raise ToolError(
            f"{page.url} is {page.content_type}, which fetch_page cannot read "
            "(it reads HTML, plain text and JSON)"
        )
    header = [f"URL: {page.url}"]
    if title:
        header.insert(0, f"Title: {title}")
    if page.truncated:
        header.append("(the page was larger than the download limit; only its start was read)")
    if len(text) > max_chars:
        text = f"{text[:max_chars]}\n[... truncated: {max_chars} of {len(text)} characters]"
    return "\n".join(header) + "\n\n" + (text or "(no readable text)")


def fetch_page_tool(fetcher: Fetcher, *, timeout: float | None = None) -> FunctionTool:
    """The ``fetch_page`` tool over ``fetcher`` (its timeout defaults to the fetch deadline + 5 s)."""

    async def fetch_page(
        url: str, max_chars: Annotated[int, Field(ge=200, le=50_000)] = 8000
    ) -> str:
        """Fetch a web page (http or https) and return its title and readable main text;
        use it when a user shares a link or asks what a specific page says.

        Args:
            url: the full http(s) URL of the page.
            max_chars: the most characters of page text to return.
        """
        accept = "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.9"
        page = await fetcher.get(url, accept=accept)
        if len(page.body) > OFF_LOOP_BYTES:
            return await asyncio.to_thread(page_text, page, max_chars)
        return page_text(page, max_chars)

    return FunctionTool(fetch_page, timeout=timeout or fetcher.timeout + 5.0)
