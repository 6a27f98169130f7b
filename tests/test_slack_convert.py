"""Pure Slack conversions, table-tested on the documented payloads in tests/fixtures/slack/.

Also the mrkdwn converter (and the proof that model text cannot ping anyone), the settings'
errors, and the bounded caches.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr

from adapters.slack.convert import (
    MESSAGE_LIMIT,
    BotIdentity,
    ChannelPolicy,
    author_from_user,
    command_message,
    command_response,
    deletions_from_event,
    message_from_event,
    plain_text,
    reply_to_posts,
)
from adapters.slack.mrkdwn import ZWSP, escape, to_mrkdwn
from adapters.slack.state import SeenSet
from bot.events import AttachmentKind, ConversationKey, MessageDeleted, Reply, Role
from bot.settings import ConfigError, SlackSettings, load_settings
from bot.settings.slack import SlackMode

FIXTURES = Path(__file__).parent / "fixtures" / "slack"
BOT = BotIdentity(user_id="UBOT0001", bot_id="BBOT0001", team_id="T111")
NONE = ChannelPolicy()


def event(name: str, **changes: Any) -> dict[str, Any]:
    body = json.loads((FIXTURES / f"{name}.json").read_text())
    ev: dict[str, Any] = copy.deepcopy(body["event"])
    ev.update(changes)
    return ev


# -- inbound ------------------------------------------------------------------------------------
def test_docs_app_mention_is_answered_in_its_own_thread() -> None:
    msg = message_from_event(
        event("slack_app_mention"), bot=BotIdentity(user_id="U0LAN0Z89"), channels=NONE
    )
    assert msg is not None
    assert msg.id == "C123ABC456:1515449522.000016"
    assert msg.conversation == ConversationKey(
        platform="slack", channel="C123ABC456", thread="1515449522.000016"
    )
    assert msg.text == "is it everything a river should be?"
    assert msg.author.id == "U061F7AUR"
    assert (msg.mentions_bot, msg.is_direct, msg.ambient, msg.reply_to_id) == (
        True,
        False,
        False,
        None,
    )
    assert msg.sent_at.timestamp() == pytest.approx(1515449522.000016)


def test_bolt_app_mention_strips_only_the_bots_mention() -> None:
    ev = event("slack_app_mention_bolt_test", text="<@W111> Hi <@W333> there!")
    msg = message_from_event(ev, bot=BotIdentity(user_id="W111"), channels=NONE)
    assert msg is not None
    assert msg.text == "Hi @W333 there!"
    assert msg.conversation.thread == "1595926230.009600"


@pytest.mark.parametrize(
    ("channels", "expected"),
    [
        (NONE, None),
        (ChannelPolicy(ambient=frozenset({"C111"})), (True, None)),
        (ChannelPolicy(always_answer=frozenset({"C111"})), (False, "1596183880.004200")),
        (ChannelPolicy(ambient=frozenset({"C999"})), None),
    ],
    ids=["not-listening", "ambient", "always-answer", "other-channel-ambient"],
)
def test_unaddressed_channel_message_follows_the_channel_policy(
    channels: ChannelPolicy, expected: tuple[bool, str | None] | None
) -> None:
    msg = message_from_event(event("slack_message"), bot=BOT, channels=channels)
    if expected is None:
        assert msg is None
        return
    assert msg is not None
    assert (msg.ambient, msg.conversation.thread) == expected
    assert msg.text == "Hello World!"
    assert not msg.addressed


def test_channel_message_mentioning_the_bot_is_left_to_app_mention() -> None:
    ev = event("slack_message", text=f"<@{BOT.user_id}> hi")
    everywhere = ChannelPolicy(always_answer=frozenset({"C111"}))
    assert message_from_event(ev, bot=BOT, channels=everywhere) is None
    dm = event("slack_message", text=f"<@{BOT.user_id}> hi", channel="D1", channel_type="im")
    msg = message_from_event(dm, bot=BOT, channels=NONE)
    assert msg is not None and msg.is_direct and msg.mentions_bot and msg.text == "hi"


def test_file_share_attachments_carry_no_bytes_yet() -> None:
    msg = message_from_event(
        event("slack_message_file_share"),
        bot=BOT,
        channels=ChannelPolicy(ambient=frozenset({"C111"})),
    )
    assert msg is not None
    (att,) = msg.attachments
    assert att.kind is AttachmentKind.IMAGE
    assert att.url == "https://files.slack.com/files-pri/T111-F111/download/file.png"
    assert (att.mime, att.filename, att.size, att.data) == ("image/png", "file.png", 92582, None)
    pdf = event("slack_message_file_share")
    pdf["files"][0].update(mimetype="application/pdf", name="a.pdf")
    msg = message_from_event(pdf, bot=BOT, channels=ChannelPolicy(ambient=frozenset({"C111"})))
    assert msg is not None and msg.attachments[0].kind is AttachmentKind.FILE


def test_thread_reply_reaches_the_bot_only_in_threads_it_is_part_of() -> None:
    ev = event("slack_message_thread_broadcast")
    assert message_from_event(ev, bot=BOT, channels=NONE) is None
    msg = message_from_event(ev, bot=BOT, channels=NONE, in_bot_thread=True)
    assert msg is not None
    assert msg.conversation.thread == "1633663824.000500"
    assert msg.reply_to_id == "C111:1633663824.000500"
    assert msg.reply_to_bot and not msg.ambient
    started_by_bot = event("slack_message_thread_broadcast", parent_user_id=BOT.user_id)
    assert message_from_event(started_by_bot, bot=BOT, channels=NONE) is not None


def test_dm_thread_reply_is_direct_in_its_thread() -> None:
    msg = message_from_event(event("slack_message_thread_reply"), bot=BOT, channels=NONE)
    assert msg is not None
    assert msg.is_direct and not msg.reply_to_bot
    assert msg.conversation == ConversationKey(
        platform="slack", channel="D111", thread="1726133698.626339"
    )
    top = event("slack_message_thread_reply")
    del top["thread_ts"]
    msg = message_from_event(top, bot=BOT, channels=NONE)
    assert msg is not None and msg.conversation.thread is None  # DMs answer where written


@pytest.mark.parametrize(
    "changes",
    [
        {"bot_id": "B999"},
        {"subtype": "bot_message"},
        {"user": BOT.user_id},
        {"subtype": "message_changed"},
        {"subtype": "channel_join"},
        {"user": None},
    ],
    ids=["bot_id", "bot_message", "own", "edit", "join", "no-user"],
)
def test_ignored_messages(changes: dict[str, Any]) -> None:
    ev = event("slack_message", channel="D1", channel_type="im", **changes)
    assert message_from_event(ev, bot=BOT, channels=NONE) is None


def test_app_mention_from_another_bot_is_ignored() -> None:
    ev = event("slack_app_mention_bolt_test", bot_id="B2", text=f"<@{BOT.user_id}> hi")
    assert message_from_event(ev, bot=BOT, channels=NONE) is None


def test_message_deleted_removes_from_each_conversation_that_may_hold_it() -> None:
    ev = event("slack_message_deleted")
    expected = MessageDeleted(
        conversation=ConversationKey(platform="slack", channel="C111", thread="1665368619.804829"),
        message_id="C111:1665368619.804829",
        author_id="U111",
    )
    assert deletions_from_event(ev, channels=NONE) == (expected,)
    ambient = deletions_from_event(ev, channels=ChannelPolicy(ambient=frozenset({"C111"})))
    assert [d.conversation.thread for d in ambient] == ["1665368619.804829", None]
    assert deletions_from_event(event("slack_message"), channels=NONE) == ()
    assert message_from_event(ev, bot=BOT, channels=NONE) is None


@pytest.mark.parametrize(
    ("wire", "plain"),
    [
        ("<@U1|ada> hi", "@ada hi"),
        ("see <#C1|general>", "see #general"),
        (
            "<https://a.io/x?a=1&amp;b=2|docs> and <https://b.io>",
            "docs (https://a.io/x?a=1&b=2) and https://b.io",
        ),
        ("<!here> &lt;tag&gt; &amp;", "@here <tag> &"),
        ("<!subteam^S1|@devs> ping", "@devs ping"),
    ],
)
def test_plain_text(wire: str, plain: str) -> None:
    assert plain_text(wire) == plain


def test_command_maps_to_text_commands() -> None:
    base = {
        "command": "/chorus",
        "channel_id": "C1",
        "user_id": "U1",
        "user_name": "ada",
        "trigger_id": "13345224609.738474920.8088930838d88f008e0",
        "response_url": "https://hooks.slack.com/commands/1/2/3",
    }
    cases = {
        "pins": "/pins",
        "": "/help",
        "Forget my birthday": "/forget my birthday",
        "reset": "/reset",
        "what is this": "/help",
        "forget 2": "/forget 2",
        "link": "/link",
        "LINK k7m2pq9x": "/link k7m2pq9x",
        "unlink": "/unlink",
    }
    for text, expected in cases.items():
        msg = command_message({**base, "text": text})
        assert msg.text == expected, text
        assert msg.id == base["trigger_id"]
        assert msg.mentions_bot and not msg.is_direct
        assert msg.private_reply, "answered through response_url, ephemerally"
        assert msg.conversation == ConversationKey(platform="slack", channel="C1")
    assert command_message({**base, "channel_id": "D1", "text": "help"}).is_direct


def test_author_roles_from_users_info() -> None:
    admin = author_from_user(
        "U1", {"is_admin": True, "profile": {"display_name": "Ada", "real_name": "Ada L"}}
    )
    assert admin.display_name == "Ada" and Role.MODERATOR in admin.roles
    owner = author_from_user("U2", {"is_owner": True, "real_name": "Bo", "profile": {}})
    assert owner.display_name == "Bo" and owner.roles == {Role.OWNER, Role.MEMBER}
    assert author_from_user("U3", {"is_bot": True}).is_bot


# -- outbound -----------------------------------------------------------------------------------
def test_reply_becomes_thread_posts_within_the_limit() -> None:
    conv = ConversationKey(platform="slack", channel="C1", thread="111.222")
    text = "\n\n".join(f"Paragraph {i}: " + "word " * 150 for i in range(20))
    posts = reply_to_posts(Reply(conversation=conv, text=text))
    assert len(posts) >= 3
    assert all(len(p.text) <= MESSAGE_LIMIT for p in posts)
    assert {(p.channel, p.thread_ts) for p in posts} == {("C1", "111.222")}
    assert " ".join(p.text for p in posts).split() == text.split()
    kwargs = posts[0].as_kwargs()
    assert kwargs["link_names"] is False and kwargs["thread_ts"] == "111.222"
    top = reply_to_posts(
        Reply(conversation=ConversationKey(platform="slack", channel="D1"), text="x")
    )
    assert "thread_ts" not in top[0].as_kwargs()


def test_command_response_is_ephemeral() -> None:
    reply = Reply(conversation=ConversationKey(platform="slack", channel="C1"), text="**pins**")
    assert command_response(reply) == [
        {"response_type": "ephemeral", "text": "*pins*", "replace_original": False}
    ]


@pytest.mark.parametrize(
    ("markdown", "mrkdwn"),
    [
        ("**bold** and __also__", "*bold* and *also*"),
        ("*italic* and _x_", "_italic_ and _x_"),
        ("~~gone~~", "~gone~"),
        ("[the docs](https://a.io/x?a=1&b=2)", "<https://a.io/x?a=1&amp;b=2|the docs>"),
        ("**[bold link](https://a.io)**", "*<https://a.io|bold link>*"),
        ("<https://a.io/auto>", "<https://a.io/auto>"),
        ("[evil](javascript:alert)", "evil (javascript:alert)"),
        ("# Title", "*Title*"),
        ("## **Loud** title ##", "*Loud title*"),
        ("- one\n  * two\n+ three", "• one\n  • two\n• three"),
        ("1. first", "1. first"),
        ("> quoted *text*", "> quoted _text_"),
        ("---", "──────────"),
        ("a < b && c > d", "a &lt; b &amp;&amp; c &gt; d"),
        ("use `a<b` or `**x**`", "use `a&lt;b` or `**x**`"),
        ("```python\nif a<b and **c**:\n    pass\n```", "```\nif a&lt;b and **c**:\n    pass\n```"),
        ("```\nunclosed", "```\nunclosed\n```"),
        ("snake_case_name stays", "snake_case_name stays"),
    ],
)
def test_markdown_to_mrkdwn(markdown: str, mrkdwn: str) -> None:
    assert to_mrkdwn(markdown) == mrkdwn


def test_model_text_pings_nobody() -> None:
    hostile = (
        "<!channel> <!here> <!everyone> <!subteam^S0123|@devs> <!date^1392734382^{date}|x> "
        "@here @channel @everyone <@U0999999> <@W0999999|bob> <#C0123|general> "
        "[<!channel>](https://a.io) <https://a.io|<!here>>"
    )
    out = to_mrkdwn(hostile)
    assert "<!" not in out and "<@" not in out and "<#" not in out
    assert re.findall(r"<(?!https?://)", out) == []
    assert "&lt;!channel&gt;" in out
    assert f"@{ZWSP}here" in out and f"@{ZWSP}everyone" in out and "@here" not in out


def test_only_addressed_users_are_mentioned() -> None:
    out = to_mrkdwn("thanks <@U0AAAAAAA>, not <@U0BBBBBBB>; also @U0AAAAAAA", ["U0AAAAAAA"])
    assert out == "thanks <@U0AAAAAAA>, not &lt;@U0BBBBBBB&gt;; also <@U0AAAAAAA>"


@given(st.text(alphabet=st.sampled_from("<>!@&|^#*_~`[]()/:hs UW01\n")))
def test_no_control_sequence_survives_any_text(text: str) -> None:
    out = to_mrkdwn(text)
    # The only '<' that reach Slack open a link this module generated.
    assert re.findall(r"<(?!https?://|mailto:)", out) == []


def test_escape() -> None:
    assert escape("<&>") == "&lt;&amp;&gt;"


# -- settings -----------------------------------------------------------------------------------
def load_slack_settings() -> SlackSettings | None:
    """What the registry does: the section when SLACK_BOT_TOKEN is set, checked."""
    settings = load_settings().slack
    if not settings.configured:
        return None
    settings.check()
    return settings


def test_settings_absent_token_means_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_slack_settings() is None
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "s")
    assert load_slack_settings() is None


def test_settings_errors_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xapp-wrong-kind")
    with pytest.raises(ConfigError, match="SLACK_BOT_TOKEN must be the bot token"):
        load_slack_settings()
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    with pytest.raises(ConfigError, match="SLACK_APP_TOKEN .*SLACK_SIGNING_SECRET"):
        load_slack_settings()
    monkeypatch.setenv("SLACK_APP_TOKEN", "xoxb-not-an-app-token")
    with pytest.raises(ConfigError, match="SLACK_APP_TOKEN must be an app-level token"):
        load_slack_settings()
    monkeypatch.setenv("SLACK_APP_TOKEN", "xapp-1")
    monkeypatch.setenv("SLACK_HTTP_PORT", "not-a-port")
    with pytest.raises(ConfigError, match="SLACK_HTTP_PORT"):
        load_slack_settings()


def test_settings_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-1")
    monkeypatch.setenv("SLACK_SIGNING_SECRET", "secret")
    monkeypatch.setenv("SLACK_API_BASE_URL", "https://slack-gov.com/api")
    monkeypatch.setenv("SLACK_AMBIENT_CHANNELS", " C1, C2 ,,")
    settings = load_slack_settings()
    assert settings is not None
    assert settings.mode is SlackMode.HTTP
    assert settings.http_port == 3000
    assert settings.api_base_url == "https://slack-gov.com/api/"
    assert settings.ambient_channels == {"C1", "C2"}
    assert settings.always_answer_channels == frozenset()
    assert settings.secret_values() == ["xoxb-1", "secret"]
    both = SlackSettings(bot_token=SecretStr("xoxb-1"), app_token=SecretStr("xapp-1"))
    assert both.mode is SlackMode.SOCKET


# -- state --------------------------------------------------------------------------------------
def test_seen_set_forgets_after_its_ttl_and_stays_bounded() -> None:
    now = [0.0]
    seen = SeenSet(ttl=10, maxsize=3, clock=lambda: now[0])
    assert [seen.first(f"Ev{i}") for i in range(5)] == [True] * 5
    assert len(seen) == 3 and "Ev0" not in seen and "Ev1" not in seen  # the oldest went first
    assert not seen.first("Ev4") and "Ev2" in seen
    now[0] = 9.0
    seen.add("Ev2")  # added again: its TTL starts over
    now[0] = 10.0  # the TTL of the first adds is up
    assert "Ev3" not in seen and "Ev4" not in seen and "Ev2" in seen and len(seen) == 1
    assert seen.first("Ev3")
    now[0] = 19.0
    assert "Ev2" not in seen and "Ev3" in seen
    with pytest.raises(ValueError, match="ttl must be positive"):
        SeenSet(ttl=0, maxsize=1)


def test_app_manifest_grants_what_the_adapter_uses() -> None:
    manifest = (Path(__file__).parents[1] / "deploy" / "slack-app-manifest.yaml").read_text()
    listed = set(re.findall(r"^\s+- ([a-z_.:]+)", manifest, flags=re.MULTILINE))
    scopes = {"app_mentions:read", "chat:write", "im:history", "channels:history"}
    scopes |= {"groups:history", "files:read", "commands", "users:read"}
    events = {"app_mention", "message.im", "message.channels", "message.groups"}
    assert scopes | events <= listed
    assert "command: /chorus" in manifest
    assert re.search(r"^\s+socket_mode_enabled: true$", manifest, flags=re.MULTILINE)
