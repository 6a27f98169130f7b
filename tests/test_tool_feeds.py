"""news_headlines: RSS and Atom from loopback feeds, filtering, ordering, caching, safe XML."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import pytest
from aiohttp import web
from yarl import URL

from bot.events import Author, ChatMessage, ConversationKey
from bot.settings.allowlist import Allowlist
from bot.tools.base import ToolContext, ToolError
from bot.tools.builtin.feeds import FeedReader, feeds_tool, parse_feed
from bot.tools.builtin.fetch import Fetcher
from bot.tools.netguard import NetGuard
from tests.loopback.base import LoopbackServer

RSS = b"""<?xml version="1.0" encoding="UTF-8"?>
<rss version="2.0" xmlns:dc="http://purl.org/dc/elements/1.1/">
<channel>
  <title>Daily Planet</title>
  <link>https://planet.example/</link>
  <item>
    <title>City council approves new bike lanes</title>
    <link>https://planet.example/bikes</link>
    <pubDate>Mon, 03 Mar 2025 09:00:00 +0000</pubDate>
    <description>&lt;p&gt;The &lt;b&gt;council&lt;/b&gt; voted 7-2.&lt;/p&gt;</description>
  </item>
  <item>
    <title>Heatwave expected as climate records fall</title>
    <link>https://planet.example/heat</link>
    <pubDate>Tue, 04 Mar 2025 18:30:00 +0100</pubDate>
    <description>Forecasters warn of a hot week.</description>
  </item>
  <item>
    <title>Undated opinion piece</title>
    <link>https://planet.example/opinion</link>
  </item>
</channel>
</rss>"""

ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom">
  <title>Science Wire</title>
  <link href="https://wire.example/"/>
  <updated>2025-03-05T12:00:00Z</updated>
  <entry>
    <title>Glaciers shrink faster: a climate study</title>
    <link rel="alternate" href="https://wire.example/glaciers"/>
    <link rel="edit" href="https://wire.example/edit/1"/>
    <id>urn:uuid:1</id>
    <updated>2025-03-05T08:00:00Z</updated>
    <summary>New satellite data.</summary>
  </entry>
  <entry>
    <title>Bike lanes approved (syndicated)</title>
    <link href="https://planet.example/bikes#via-wire"/>
    <id>urn:uuid:2</id>
    <published>2025-03-01T10:00:00+00:00</published>
  </entry>
</feed>"""

RDF = b"""<?xml version="1.0"?>
<rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"
         xmlns="http://purl.org/rss/1.0/" xmlns:dc="http://purl.org/dc/elements/1.1/">
  <channel rdf:about="https://old.example/"><title>Old School</title></channel>
  <item rdf:about="https://old.example/1">
    <title>RSS 1.0 lives</title><link>https://old.example/1</link>
    <dc:date>2025-02-01T00:00:00Z</dc:date>
  </item>
</rdf:RDF>"""

BILLION_LAUGHS = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
]>
<rss version="2.0"><channel><title>&lol4;</title></channel></rss>"""

XXE = b"""<?xml version="1.0"?>
<!DOCTYPE rss [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>
<rss version="2.0"><channel><title>x</title>
<item><title>&xxe;</title><link>https://evil.example/</link></item></channel></rss>"""


# A document type on the feed's own server, a stylesheet, relative links and a script in a
# summary: nothing but the feed itself may be fetched, and the links come out absolute.
LINKED = b"""<?xml version="1.0"?>
<!DOCTYPE rss SYSTEM "/dtd">
<?xml-stylesheet type="text/xsl" href="/style"?>
<rss version="2.0"><channel><title>Local News</title>
<item><title>Relative</title><link>/stories/1</link>
<description>&lt;p&gt;Read &lt;script src="/js"&gt;alert(1)&lt;/script&gt;on.&lt;/p&gt;
</description>
</item></channel></rss>"""


class FeedSite(LoopbackServer):
    def __init__(self) -> None:
        super().__init__()
        self.documents = {"rss": RSS, "atom": ATOM, "rdf": RDF, "bomb": BILLION_LAUGHS, "xxe": XXE}
        self.documents["linked"] = LINKED

    def routes(self) -> list[web.RouteDef]:
        return [web.get("/{name}", self.handle)]

    async def handle(self, request: web.Request) -> web.Response:
        await self.record(request)
        name = request.match_info["name"]
        if name == "broken":
            return web.Response(status=500, text="oops")
        if name == "html":
            return web.Response(
                text="<html><body>not a feed</body></html>", content_type="text/html"
            )
        if name not in self.documents:
            raise web.HTTPNotFound()
        return web.Response(body=self.documents[name], content_type="application/rss+xml")

    def hits(self, name: str) -> int:
        return sum(1 for r in self.requests if r.path == f"/{name}")


@pytest.fixture
async def feeds() -> AsyncIterator[FeedSite]:
    server = FeedSite()
    await server.start()
    try:
        yield server
    finally:
        await server.close()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make_reader(site: FeedSite, *names: str, clock: FakeClock | None = None) -> FeedReader:
    port = URL(site.url).port
    fetcher = Fetcher(NetGuard(allow=Allowlist.parse([f"127.0.0.1:{port}"])))
    return FeedReader([f"{site.url}/{n}" for n in names], fetcher, clock=clock or FakeClock())


def make_ctx() -> ToolContext:
    message = ChatMessage(
        platform="console",
        id="m1",
        conversation=ConversationKey(platform="console", channel="local"),
        author=Author(id="u1"),
        text="any news?",
    )
    return ToolContext(message=message)


async def headlines(reader: FeedReader, **arguments: object) -> str:
    return await feeds_tool(reader).call(dict(arguments), make_ctx())


async def test_headlines_newest_first_across_feeds_deduplicated(feeds: FeedSite) -> None:
    text = await headlines(make_reader(feeds, "rss", "atom"), limit=10)
    assert text.splitlines() == [
        "Headlines, newest first:",
        "1. Glaciers shrink faster: a climate study (Science Wire, 2025-03-05 08:00 UTC)",
        "   https://wire.example/glaciers",
        "   New satellite data.",
        "2. Heatwave expected as climate records fall (Daily Planet, 2025-03-04 17:30 UTC)",
        "   https://planet.example/heat",
        "   Forecasters warn of a hot week.",
        "3. City council approves new bike lanes (Daily Planet, 2025-03-03 09:00 UTC)",
        "   https://planet.example/bikes",
        "   The council voted 7-2.",
        # the syndicated copy of the bike story has the same link: dropped
        "4. Undated opinion piece (Daily Planet, undated)",
        "   https://planet.example/opinion",
    ]


async def test_topic_filter_and_limit(feeds: FeedSite) -> None:
    reader = make_reader(feeds, "rss", "atom")
    climate = await headlines(reader, topic="Climate")
    assert climate.splitlines()[0] == "Headlines about 'Climate', newest first:"
    assert "Glaciers" in climate and "Heatwave" in climate and "bike" not in climate
    both_words = await headlines(reader, topic="climate glaciers")
    assert "Glaciers" in both_words and "Heatwave" not in both_words
    assert "council" in await headlines(reader, topic="council")  # summaries count too
    one = await headlines(reader, limit=1)
    assert one.count("\n1. ") == 1 and "\n2. " not in one and "Glaciers" in one
    nothing = await headlines(reader, topic="volcano")
    assert nothing == "No headlines about 'volcano' in the followed feeds right now."
    with pytest.raises(ToolError, match="limit: Input should be less than or equal to 20"):
        await headlines(reader, limit=50)


async def test_a_failing_feed_is_reported_not_fatal(feeds: FeedSite) -> None:
    text = await headlines(make_reader(feeds, "broken", "rss", "html"))
    assert "City council approves" in text
    assert f"(skipped feed {feeds.url}/broken: {feeds.url}/broken answered HTTP 500" in text
    assert f"(skipped feed {feeds.url}/html: not an RSS or Atom feed (root element <html>))" in text


async def test_all_feeds_failing_is_a_tool_error(feeds: FeedSite) -> None:
    with pytest.raises(ToolError, match="no news feed could be read"):
        await headlines(make_reader(feeds, "broken", "missing"))


async def test_entity_bombs_and_external_entities_are_refused(feeds: FeedSite) -> None:
    text = await headlines(make_reader(feeds, "bomb", "xxe", "rss"))
    assert f"(skipped feed {feeds.url}/bomb: refused unsafe XML (EntitiesForbidden))" in text
    assert f"(skipped feed {feeds.url}/xxe: refused unsafe XML (EntitiesForbidden))" in text
    assert "root:" not in text and "lollol" not in text
    assert "City council approves" in text


async def test_only_the_feed_is_fetched_and_its_relative_links_come_out_absolute(
    feeds: FeedSite,
) -> None:
    text = await headlines(make_reader(feeds, "linked"))
    assert text.splitlines() == [
        "Headlines, newest first:",
        "1. Relative (Local News, undated)",
        f"   {feeds.url}/stories/1",
        "   Read on.",
    ]
    assert [r.path for r in feeds.requests] == ["/linked"]  # no DTD, stylesheet or script


async def test_feeds_are_cached_and_fetched_once_when_asked_concurrently(feeds: FeedSite) -> None:
    clock = FakeClock()
    reader = make_reader(feeds, "rss", "broken", clock=clock)
    first, second = await asyncio.gather(reader.read(), reader.read())
    assert first == second
    assert (feeds.hits("rss"), feeds.hits("broken")) == (1, 1)
    clock.now += 59
    await reader.read()
    assert (feeds.hits("rss"), feeds.hits("broken")) == (1, 1)
    clock.now += 2  # past the 60 s error TTL, inside the 300 s TTL
    await reader.read()
    assert (feeds.hits("rss"), feeds.hits("broken")) == (1, 2)
    clock.now += 300
    await reader.read()
    assert (feeds.hits("rss"), feeds.hits("broken")) == (2, 3)


async def test_feeds_go_through_the_network_guard(feeds: FeedSite) -> None:
    reader = FeedReader([f"{feeds.url}/rss"], Fetcher(), clock=FakeClock())  # nothing allowed
    with pytest.raises(ToolError, match="refused: 127.0.0.1 is a loopback address"):
        await headlines(reader)
    assert feeds.requests == []


def test_parse_rss1_and_dates() -> None:
    (item,) = parse_feed(RDF, "https://old.example/rss")
    assert (item.title, item.link, item.source) == (
        "RSS 1.0 lives",
        "https://old.example/1",
        "Old School",
    )
    assert item.published == datetime(2025, 2, 1, tzinfo=UTC)
    with pytest.raises(ToolError, match="not well-formed XML"):
        parse_feed(b"<rss><channel>", "https://x.example/")


def test_source_falls_back_to_the_feed_host() -> None:
    doc = b"<rss><channel><item><title>T</title><guid>https://h.example/1</guid></item></channel></rss>"
    (item,) = parse_feed(doc, "https://news.example/feed.xml")
    assert (item.source, item.link, item.published) == ("news.example", "https://h.example/1", None)


def test_reader_needs_feeds_and_spec() -> None:
    with pytest.raises(ValueError, match="at least one feed"):
        FeedReader([], Fetcher())
    spec = feeds_tool(FeedReader(["https://a.example/rss"], Fetcher())).spec
    assert spec.name == "news_headlines"
    assert spec.parameters["properties"]["limit"]["maximum"] == 20
    assert "required" not in spec.parameters
