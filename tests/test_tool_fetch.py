"""fetch_page and the network guard, against loopback servers (allow-listed by port) only."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from yarl import URL

from bot.events import Author, ChatMessage, ConversationKey
from bot.settings.allowlist import Allowlist
from bot.tools.base import ToolContext, ToolError
from bot.tools.builtin import fetch as fetch_module
from bot.tools.builtin.fetch import Fetcher, fetch_page_tool, readable_text
from bot.tools.netguard import NetGuard, classify
from bot.tools.pinned import PinnedResolver
from tests.loopback.base import LoopbackServer

PAGE = """<!doctype html>
<html><head><title>  Otters   &amp; rivers </title>
<style>body { color: red }</style><script>var secret = "tracking";</script></head>
<body>
<nav><a href="/">Home</a> <a href="/about">About us</a></nav>
<header><p>Site banner</p></header>
<main>
  <h1>Otters</h1>
  <p>Otters   are
     semi-aquatic   mammals.</p>
  <noscript>Enable JavaScript!</noscript>
  <ul><li>They hold hands.</li><li>They use tools.</li></ul>
  <form><button>Subscribe</button></form>
</main>
<footer>Copyright 2025</footer>
</body></html>"""


class Site(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/{name}", self.handle)]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        await self.record(request)
        name = request.match_info["name"]
        if name == "page":
            return web.Response(text=PAGE, content_type="text/html")
        if name == "plain":
            return web.Response(text="just   text\n", content_type="text/plain")
        if name == "json":
            return web.Response(text='{"a": [1, 2]}', content_type="application/json")
        if name == "png":
            return web.Response(body=b"\x89PNG\r\n", content_type="image/png")
        if name == "latin1":
            body = "<p>caf\u00e9</p>".encode("latin-1")
            return web.Response(
                body=body, headers={"Content-Type": "text/html; charset=iso-8859-1"}
            )
        if name == "sniffed":
            body = '<meta charset="windows-1252"><p>na\u00efve</p>'.encode("cp1252")
            return web.Response(body=body, headers={"Content-Type": "text/html"})
        if name == "bightml":
            paragraphs = "".join(f"<p>paragraph {n} of a long page</p>" for n in range(60_000))
            return web.Response(text=f"<main>{paragraphs}</main>", content_type="text/html")
        if name == "big":
            response = web.StreamResponse(headers={"Content-Type": "text/plain"})
            await response.prepare(request)
            for _ in range(50):
                await response.write(b"a" * 65536)
            await response.write_eof()
            return response
        if name == "redirect":
            raise web.HTTPFound(request.query["to"])
        if name == "loop":
            raise web.HTTPFound("/loop")
        if name == "hang":
            await self.release.wait()
            return web.Response(text="late")
        raise web.HTTPNotFound()


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    server = Site()
    await server.start()
    try:
        yield server
    finally:
        server.release.set()
        await server.close()


@pytest.fixture
async def other() -> AsyncIterator[Site]:
    """A second loopback server that is NOT allow-listed."""
    server = Site()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


def port_of(server: Site) -> int:
    port = URL(server.url).port
    assert port is not None
    return port


def allowing(server: Site, **kwargs: object) -> Fetcher:
    guard = NetGuard(allow=Allowlist.parse([f"127.0.0.1:{port_of(server)}"]))
    return Fetcher(guard, **kwargs)  # type: ignore[arg-type]


def make_ctx() -> ToolContext:
    message = ChatMessage(
        platform="console",
        id="m1",
        conversation=ConversationKey(platform="console", channel="local"),
        author=Author(id="u1"),
        text="read this",
    )
    return ToolContext(message=message)


# -- the guard ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("host", "reason"),
    [
        ("127.0.0.1", "127.0.0.1 is a loopback address"),
        ("localhost", "localhost resolves to"),
        ("10.0.0.1", "10.0.0.1 is a private address"),
        ("192.168.1.20", "is a private address"),
        ("169.254.169.254", "169.254.169.254 is a link-local address"),
        ("[::1]", "::1 is a loopback address"),
        ("[::ffff:127.0.0.1]", "a loopback address (embedded in an IPv6 address)"),
        ("0.0.0.0", "0.0.0.0 is an unspecified address"),
        ("100.64.0.7", "a carrier-grade NAT (shared) address"),
        ("[fd00::1]", "a private address"),
        ("[fe80::1]", "a link-local address"),
        ("224.0.0.1", "a multicast address"),
        ("metadata.google.internal", "metadata.google.internal is a cloud metadata service"),
    ],
)
async def test_internal_targets_are_refused_by_default(site: Site, host: str, reason: str) -> None:
    url = f"http://{host}:{port_of(site)}/page"
    with pytest.raises(ToolError) as info:
        await Fetcher().get(url)
    message = str(info.value)
    assert message.startswith("refused: ") and reason in message
    assert message.endswith("(set CHORUS_FETCH_ALLOW to permit it)")
    assert site.requests == []  # nothing was sent


async def test_a_name_resolving_to_a_private_address_is_refused() -> None:
    async def fake_dns(host: str, port: int) -> list[str]:
        return {"example.internal": ["10.0.0.5"], "mixed.example": ["93.184.216.34", "::1"]}[host]

    fetcher = Fetcher(NetGuard(resolve=fake_dns))
    with pytest.raises(ToolError) as info:
        await fetcher.get("https://example.internal/x")
    assert str(info.value) == (
        "refused: example.internal resolves to 10.0.0.5, a private address "
        "(set CHORUS_FETCH_ALLOW to permit it)"
    )
    with pytest.raises(ToolError, match=r"mixed.example resolves to ::1, a loopback address"):
        await fetcher.get("http://mixed.example/")  # ANY bad address refuses the host


async def test_the_connection_goes_to_the_vetted_address_only(site: Site) -> None:
    """DNS rebinding: the name is resolved once; later answers are never used to connect."""
    answers = iter([["127.0.0.1"], ["10.9.9.9"], ["10.9.9.9"]])
    lookups: list[str] = []

    async def rebinding_dns(host: str, port: int) -> list[str]:
        lookups.append(host)
        return next(answers)

    guard = NetGuard(allow=Allowlist.parse([f"127.0.0.1:{port_of(site)}"]), resolve=rebinding_dns)
    page = await Fetcher(guard).get(f"http://rebind.test:{port_of(site)}/plain")
    assert page.body == b"just   text\n"
    assert lookups == ["rebind.test"]
    assert site.requests[0].headers["host"] == f"rebind.test:{port_of(site)}"


async def test_pinned_resolver_knows_only_vetted_hosts() -> None:
    resolver = PinnedResolver()
    resolver.pin("Example.COM.", ["93.184.216.34", "2606:2800:220:1::1"])
    both = await resolver.resolve("example.com", 443)
    assert [r["host"] for r in both] == ["93.184.216.34", "2606:2800:220:1::1"]
    v6 = await resolver.resolve("example.com", 443, family=socket.AF_INET6)
    assert [(r["host"], r["port"]) for r in v6] == [("2606:2800:220:1::1", 443)]
    with pytest.raises(OSError, match="not vetted"):
        await resolver.resolve("other.example", 443)


def test_allowlist_entries() -> None:
    allow = Allowlist.parse(
        ["Intranet.Example.", "wiki.corp:8443", "10.1.0.0/16", "[::1]:9000", ""]
    )
    assert allow.allows_host("intranet.example", 80)
    assert allow.allows_host("wiki.corp", 8443) and not allow.allows_host("wiki.corp", 443)
    assert allow.allows_address(ipaddress.ip_address("10.1.2.3"), 80)
    assert not allow.allows_address(ipaddress.ip_address("10.2.0.1"), 80)
    assert allow.allows_address(ipaddress.ip_address("::1"), 9000)
    assert not allow.allows_address(ipaddress.ip_address("::1"), 9001)
    assert allow.allows_address(ipaddress.ip_address("::ffff:10.1.0.9"), 1)
    for bad in ("http://x/", "a b", "host:99999", "1.2.3.4/40"):
        with pytest.raises(ValueError, match="CHORUS_FETCH_ALLOW"):
            Allowlist.parse([bad])


@pytest.mark.parametrize(
    ("address", "blocked"),
    [
        ("93.184.216.34", False),
        ("2606:2800:220:1::1", False),
        ("64:ff9b::a00:1", True),  # NAT64 of 10.0.0.1
        ("2002:7f00:1::", True),  # 6to4 of 127.0.0.1
        ("198.18.0.1", True),  # benchmarking range: not global
        ("240.0.0.1", True),
    ],
)
def test_classify(address: str, blocked: bool) -> None:
    assert (classify(ipaddress.ip_address(address)) is not None) is blocked


async def test_only_http_and_https() -> None:
    for url in ("file:///etc/passwd", "gopher://example.org/", "ftp://example.org/x"):
        with pytest.raises(ToolError, match="only http and https URLs"):
            await Fetcher().get(url)
    with pytest.raises(ToolError, match="not an absolute"):
        await Fetcher().get("/relative")


# -- redirects ----------------------------------------------------------------------------------
async def test_redirects_are_followed_and_each_hop_is_checked(site: Site, other: Site) -> None:
    fetcher = allowing(site)
    page = await fetcher.get(f"{site.url}/redirect?to=/plain")
    assert page.url == f"{site.url}/plain" and page.body == b"just   text\n"
    with pytest.raises(ToolError, match=r"refused: 127.0.0.1 is a loopback address"):
        await fetcher.get(f"{site.url}/redirect?to={other.url}/plain")
    assert other.requests == []  # the forbidden hop was never contacted
    with pytest.raises(ToolError, match="refused: 169.254.169.254"):
        await fetcher.get(f"{site.url}/redirect?to=http://169.254.169.254/latest/meta-data/")
    with pytest.raises(ToolError, match="only http and https"):
        await fetcher.get(f"{site.url}/redirect?to=file:///etc/passwd")


async def test_redirect_limit(site: Site) -> None:
    with pytest.raises(ToolError, match=r"too many redirects \(more than 5\)"):
        await allowing(site).get(f"{site.url}/loop")
    assert len(site.requests) == 6


# -- downloads ----------------------------------------------------------------------------------
async def test_download_stops_at_the_size_cap(site: Site) -> None:
    page = await allowing(site, max_bytes=100_000).get(f"{site.url}/big")
    assert page.truncated and len(page.body) == 100_000
    whole = await allowing(site, max_bytes=4_000_000).get(f"{site.url}/big")
    assert not whole.truncated and len(whole.body) == 50 * 65536


async def test_http_errors_and_timeouts(site: Site) -> None:
    with pytest.raises(ToolError, match=r"answered HTTP 404 Not Found"):
        await allowing(site).get(f"{site.url}/missing")
    with pytest.raises(ToolError, match=r"timed out after 0.05 s"):
        await allowing(site, timeout=0.05).get(f"{site.url}/hang")


# -- the tool -------------------------------------------------------------------------------------
async def test_fetch_page_returns_readable_main_text(site: Site) -> None:
    tool = fetch_page_tool(allowing(site))
    text = await tool.call({"url": f"{site.url}/page"}, make_ctx())
    assert text == (
        f"Title: Otters & rivers\nURL: {site.url}/page\n\n"
        "Otters\nOtters are semi-aquatic mammals.\nThey hold hands.\nThey use tools."
    )
    for noise in (
        "tracking",
        "color: red",
        "About us",
        "Enable JavaScript",
        "Subscribe",
        "Copyright",
    ):
        assert noise not in text


async def test_text_and_json_pass_through_other_types_refused(site: Site) -> None:
    tool = fetch_page_tool(allowing(site))
    ctx = make_ctx()
    assert (await tool.call({"url": f"{site.url}/plain"}, ctx)).endswith("\n\njust   text")
    assert (await tool.call({"url": f"{site.url}/json"}, ctx)).endswith('\n\n{"a": [1, 2]}')
    with pytest.raises(ToolError, match=r"/png is image/png, which fetch_page cannot read"):
        await tool.call({"url": f"{site.url}/png"}, ctx)


async def test_charsets_and_truncation(site: Site) -> None:
    tool = fetch_page_tool(allowing(site))
    ctx = make_ctx()
    assert (await tool.call({"url": f"{site.url}/latin1"}, ctx)).endswith("caf\u00e9")
    assert (await tool.call({"url": f"{site.url}/sniffed"}, ctx)).endswith("na\u00efve")
    text = await tool.call({"url": f"{site.url}/big", "max_chars": 300}, ctx)
    assert text.endswith("[... truncated: 300 of 2000000 characters]")  # the default cap
    small = fetch_page_tool(allowing(site, max_bytes=2048))
    capped = await small.call({"url": f"{site.url}/big"}, ctx)
    assert "larger than the download limit" in capped


def test_readable_text_without_main_uses_body() -> None:
    title, text = readable_text(
        "<title>T</title><body><div>a<br>b</div><script>x()</script><p>c&nbsp; d</p></body>"
    )
    assert (title, text) == ("T", "a\nb\nc d")
    _, code = readable_text("<article><p>see</p><pre>x = 1\ny = 2</pre></article>")
    assert code == "see\nx = 1\ny = 2"


def test_fetch_page_spec() -> None:
    spec = fetch_page_tool(Fetcher()).spec
    assert spec.parameters["required"] == ["url"]
    assert spec.parameters["properties"]["max_chars"] == {
        "default": 8000,
        "description": "the most characters of page text to return.",
        "maximum": 50000,
        "minimum": 200,
        "type": "integer",
    }


async def test_a_big_page_is_parsed_off_the_event_loop(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 2 MB page takes hundreds of milliseconds to parse: never on the loop that answers
    everyone else. A small one stays on the loop (a thread hop would cost more)."""
    threads: list[int] = []
    original = fetch_module.readable_text

    def spy(html: str) -> tuple[str, str]:
        threads.append(threading.get_ident())
        return original(html)

    monkeypatch.setattr(fetch_module, "readable_text", spy)
    tool = fetch_page_tool(allowing(site, max_bytes=4_000_000))
    text = await tool.call({"url": f"{site.url}/bightml", "max_chars": 50_000}, make_ctx())
    assert "paragraph 0 of a long page" in text
    await tool.call({"url": f"{site.url}/page"}, make_ctx())
    loop_thread = threading.get_ident()
    assert threads[0] != loop_thread, "the 2 MB page was parsed on the event loop"
    assert threads[1] == loop_thread
