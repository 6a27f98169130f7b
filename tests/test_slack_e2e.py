"""The Slack adapter end to end over the HTTP Events API: the real bolt app and slack-sdk against
a loopback Slack (tests/slack_rig.py). Signatures, retries, threads, images, pings, pacing,
rate limits, slash commands, deletions, other bots and DMs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator

import pytest

from bot.events import AttachmentKind, Role
from tests.loopback.base import ScriptedFailure
from tests.loopback.slack_server import SlackServer
from tests.slack_rig import (
    BOT_TOKEN,
    PNG,
    Rig,
    fixture,
    mention,
    running_rig,
)


@pytest.fixture
async def server() -> AsyncIterator[SlackServer]:
    async with SlackServer(bot_token=BOT_TOKEN) as srv:
        assert isinstance(srv, SlackServer)
        yield srv


@pytest.fixture
async def rig(server: SlackServer) -> AsyncIterator[Rig]:
    async for value in running_rig(server):
        yield value


@pytest.fixture
async def ambient_rig(server: SlackServer) -> AsyncIterator[Rig]:
    async for value in running_rig(server, ambient_channels=frozenset({"C111"})):
        yield value


# -- HTTP Events API ----------------------------------------------------------------------------
async def test_a_request_leaves_chorus_logging_as_it_was(rig: Rig) -> None:
    """bolt sets the logger named after the app from its base logger on every request
    (``get_bolt_app_logger``): an app named "chorus" reset Chorus's own logger to NOTSET after
    the first Slack event, and every INFO line from then on was dropped."""
    ours = logging.getLogger("chorus")
    before = (ours.level, list(ours.handlers), ours.disabled)
    ours.setLevel(logging.INFO)
    try:
        status, _ = await rig.post(mention())
        await rig.settle()
        assert status == 200 and rig.seen
        assert ours.level == logging.INFO and ours.handlers == before[1]
        assert ours.isEnabledFor(logging.INFO) and not ours.disabled
    finally:
        ours.setLevel(before[0])


async def test_bad_signature_is_rejected_and_nothing_published(rig: Rig) -> None:
    status, _ = await rig.post(mention(), secret="not-the-secret")
    assert status == 401
    await rig.settle()
    assert rig.seen == [] and rig.server.posts == []


async def test_url_verification_challenge_is_answered(rig: Rig) -> None:
    body = fixture("slack_url_verification")
    status, text = await rig.post(body)
    assert status == 200
    assert json.loads(text) == {"challenge": body["challenge"]}


async def test_app_mention_is_answered_in_its_thread(rig: Rig) -> None:
    rig.server.users["W222"] = {"id": "W222", "is_admin": True, "profile": {"display_name": "Ada"}}
    rig.answer = lambda m: "**Yes**, <@W222> & friends: <!channel>"
    status, text = await rig.post(mention())
    assert (status, text) == (200, "")
    await rig.settle()

    (seen,) = rig.seen
    assert seen.id == "C111:1595926230.009600"
    assert seen.text == "Hi there!" and seen.mentions_bot
    assert seen.author.display_name == "Ada" and Role.MODERATOR in seen.author.roles
    assert rig.server.posts == [
        {
            "channel": "C111",
            "thread_ts": "1595926230.009600",
            "text": "*Yes*, <@W222> &amp; friends: &lt;!channel&gt;",
            "mrkdwn": True,
            "link_names": False,
            "unfurl_links": False,
            "unfurl_media": False,
        }
    ]
    (call,) = rig.server.calls("/api/chat.postMessage")
    assert call.headers["authorization"] == f"Bearer {BOT_TOKEN}"

    # A reply in that thread, without a mention, reaches the bot: it answered there.
    follow = fixture("slack_message")
    follow["event_id"] = "Ev222"
    follow["event"].update(user="W222", ts="1595926299.000100", thread_ts="1595926230.009600")
    await rig.post(follow)
    await rig.settle()
    assert rig.seen[1].reply_to_bot and not rig.seen[1].ambient
    assert rig.server.posts[1]["thread_ts"] == "1595926230.009600"
    # ...but the same in a thread the bot is not part of does not.
    follow["event_id"] = "Ev333"
    follow["event"].update(ts="1595926300.000100", thread_ts="1595920000.000001")
    await rig.post(follow)
    await rig.settle()
    assert len(rig.seen) == 2


async def test_retried_event_is_answered_once(rig: Rig) -> None:
    body = mention(event_id="Ev0RETRY")
    assert (await rig.post(body))[0] == 200
    for attempt in (1, 2, 3):
        status, _ = await rig.post(
            body,
            headers={"X-Slack-Retry-Num": str(attempt), "X-Slack-Retry-Reason": "http_timeout"},
        )
        assert status == 200  # acknowledged, or Slack keeps retrying
    await rig.settle()
    assert len(rig.seen) == 1
    assert len(rig.server.posts) == 1


async def test_file_share_image_reaches_the_model_as_bytes(ambient_rig: Rig) -> None:
    rig = ambient_rig
    rig.server.files["file.png"] = (PNG, "image/png")
    body = fixture("slack_message_file_share")
    image = body["event"]["files"][0]
    image.update(url_private=rig.server.file_url("file.png"), size=len(PNG))
    image["url_private_download"] = image["url_private"]
    pdf = {**image, "id": "F2", "name": "a.pdf", "mimetype": "application/pdf"}
    pdf["url_private_download"] = rig.server.file_url("a.pdf")
    foreign = {
        **image,
        "id": "F3",
        "name": "x.png",
        "url_private_download": "https://evil.example/x.png",
    }
    body["event"]["files"] = [image, pdf, foreign]
    await rig.post(body)
    await rig.settle()

    (seen,) = rig.seen
    assert seen.ambient
    got, doc, elsewhere = seen.attachments
    assert (got.kind, got.mime, got.data) == (AttachmentKind.IMAGE, "image/png", PNG)
    assert (doc.kind, doc.data) == (AttachmentKind.FILE, None)
    assert (elsewhere.kind, elsewhere.data) == (AttachmentKind.IMAGE, None)
    (download,) = rig.server.calls("/files/file.png")
    assert download.headers["authorization"] == f"Bearer {BOT_TOKEN}"
    assert rig.server.calls("/files/a.pdf") == []


async def test_image_over_the_size_cap_is_not_downloaded(server: SlackServer) -> None:
    server.files["file.png"] = (PNG, "image/png")
    async for rig in running_rig(server, ambient_channels=frozenset({"C111"}), max_file_bytes=100):
        body = fixture("slack_message_file_share")
        body["event"]["files"][0].update(
            url_private_download=server.file_url("file.png"), size=None
        )
        await rig.post(body)
        await rig.settle()
        assert rig.seen[0].attachments[0].data is None  # the stream was cut at the cap
        body["event"]["files"][0]["size"] = len(PNG)
        body["event_id"], body["event"]["ts"] = "Ev2", "1652227999.000001"
        await rig.post(body)
        await rig.settle()
        assert rig.seen[1].attachments[0].data is None
        assert len(server.calls("/files/file.png")) == 1  # the declared size was enough


async def test_model_text_pings_nobody(rig: Rig) -> None:
    rig.answer = lambda m: (
        "<!channel> <!here> <!everyone> <!subteam^S0123|@devs> @here @channel @everyone "
        "<@U0STRANGER> <@W222>"
    )
    await rig.post(mention())
    await rig.settle()
    (post,) = rig.server.posts
    text = post["text"]
    assert "<!" not in text and "<@U0STRANGER>" not in text
    assert text.count("<") == 1 and "<@W222>" in text  # only the addressed author
    assert post["link_names"] is False
    assert "@here" not in text and "@channel" not in text and "@everyone" not in text


async def test_long_answer_is_split_and_paced(rig: Rig) -> None:
    rig.answer = lambda m: "\n\n".join(f"Part {i}. " + "lorem ipsum " * 150 for i in range(9))
    await rig.post(mention())
    await rig.settle()
    posts = rig.server.posts
    assert len(posts) >= 3
    assert all(len(p["text"]) <= 3900 for p in posts)
    assert {p["thread_ts"] for p in posts} == {"1595926230.009600"}
    assert [p["text"].split(".")[0] for p in posts][:1] == ["Part 0"]
    assert rig.time.sleeps == [1.0] * (len(posts) - 1)  # about one message per second


async def test_rate_limited_post_is_retried_after_retry_after(rig: Rig) -> None:
    rig.server.rate_limit(7)
    await rig.post(mention())
    await rig.settle()
    calls = rig.server.calls("/api/chat.postMessage")
    assert len(calls) == 2 and calls[0].body == calls[1].body
    assert rig.time.sleeps == [7.0]
    assert len(rig.seen) == 1


async def test_failed_send_is_dropped_and_the_loop_goes_on(rig: Rig) -> None:
    rig.server.failures.append(ScriptedFailure(200, {"ok": False, "error": "channel_not_found"}))
    await rig.post(mention())
    await rig.settle()
    await rig.post(mention(event_id="Ev2", text="again"))
    await rig.settle()
    assert len(rig.server.calls("/api/chat.postMessage")) == 2  # no retry of channel_not_found
    assert rig.time.sleeps == [1.0]  # just the pacing of the second message


async def test_slash_command_answers_ephemerally(rig: Rig) -> None:
    rig.answer = lambda m: "**Pinned**: nothing yet"
    form = {
        "token": "x",
        "team_id": "T111",
        "channel_id": "C111",
        "channel_name": "general",
        "user_id": "W222",
        "user_name": "ada",
        "command": "/chorus",
        "text": "pins",
        "response_url": rig.server.response_url("r1"),
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "api_app_id": "A111",
    }
    status, text = await rig.post(form, form=True)
    assert (status, text) == (200, "")
    await rig.settle()
    (seen,) = rig.seen
    assert (seen.text, seen.id, seen.mentions_bot) == ("/pins", form["trigger_id"], True)
    assert rig.server.responses == [
        {"response_type": "ephemeral", "text": "*Pinned*: nothing yet", "replace_original": False}
    ]
    assert rig.server.posts == []


async def test_deleted_message_is_published(rig: Rig) -> None:
    await rig.post(fixture("slack_message_deleted"))
    await rig.settle()
    (deleted,) = rig.deleted
    assert deleted.message_id == "C111:1665368619.804829"
    assert deleted.conversation.thread == "1665368619.804829"
    assert rig.seen == []


async def test_other_bots_are_ignored(rig: Rig) -> None:
    body = mention()
    body["event"]["bot_id"] = "B0OTHER"
    await rig.post(body)
    dm = fixture("slack_message")
    dm["event_id"] = "Ev2"
    dm["event"].update(channel="D111", channel_type="im", subtype="bot_message", bot_id="B0OTHER")
    await rig.post(dm)
    await rig.settle()
    assert rig.seen == [] and rig.server.posts == []


async def test_direct_message_is_answered_top_level(rig: Rig) -> None:
    dm = fixture("slack_message")
    dm["event"].update(channel="D111", channel_type="im")
    await rig.post(dm)
    await rig.settle()
    assert rig.seen[0].is_direct
    (post,) = rig.server.posts
    assert post["channel"] == "D111" and "thread_ts" not in post


JUNK = [
    (b"{not json", "application/json"),
    (b"[1, 2, 3]", "application/json"),
    (b"null", "application/json"),
    (b'{"event": "\xff\xfe"}', "application/json"),
    (b"payload=%7Bbroken", "application/x-www-form-urlencoded"),
    (b"payload=%5B%5D", "application/x-www-form-urlencoded"),
    (b"a=1&b", "application/x-www-form-urlencoded"),
    (b"\xc3\x28=1", "application/x-www-form-urlencoded"),
    (b"hello", "text/plain"),
]


@pytest.mark.parametrize(("raw", "kind"), JUNK, ids=lambda v: repr(v)[:24])
async def test_junk_gets_a_4xx_and_one_log_line_signed_or_not(
    rig: Rig, raw: bytes, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Bolt parses before it verifies: unscreened, each of these was a 500 and a traceback."""
    with caplog.at_level(logging.INFO):
        unsigned, _ = await rig.post_raw(raw, kind, secret=None)
        forged, _ = await rig.post_raw(raw, kind, secret="not-the-secret")
        signed, reason = await rig.post_raw(raw, kind)
    assert unsigned == forged == 401
    assert signed in (400, 415), reason
    refusals = [r for r in caplog.records if r.getMessage() == "slack request refused"]
    assert len(refusals) == 3
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    status, _ = await rig.post(mention())  # and the endpoint goes on answering
    await rig.settle()
    assert status == 200 and [m.text for m in rig.seen] == ["Hi there!"]


async def test_an_oversized_body_is_refused_unread(rig: Rig) -> None:
    status, _ = await rig.post_raw(b"{" + b" " * (2 * 1024 * 1024) + b"}", "application/json")
    assert status == 413
