"""``chorus run`` as a real process reading YouTube over gRPC ``streamList`` (the loopback gRPC
server) and answering over REST ``liveChatMessages.insert`` (the loopback REST server): while
the stream works the chat is never polled, a closed stream is resumed, and SIGTERM ends the
process cleanly with a stream open."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from tests.loopback.anthropic_server import AnthropicServer
from tests.loopback.youtube_grpc import YouTubeStreamServer
from tests.loopback.youtube_server import VIDEO_ID, YouTubeServer, text_item
from tests.test_chat_e2e import ROOT, base_env, spawn_chorus


def _mention(n: int) -> dict[str, object]:
    return text_item(f"LCC.e2e-{n}", f"@Chorus question {n}?", author_id="UCalice", name="Alice")


async def test_chorus_run_streams_the_chat_and_answers_without_polling(tmp_path: Path) -> None:
    async with AnthropicServer() as model, YouTubeServer() as youtube:
        stream = await YouTubeStreamServer(youtube).start()
        model.replies.extend(["First answer.", "Second answer."])
        env = base_env(tmp_path) | {
            "CHORUS_MODEL": "anthropic:claude-test",
            "ANTHROPIC_API_KEY": "k",
            "ANTHROPIC_BASE_URL": model.base_url,
            "YOUTUBE_CLIENT_ID": youtube.client_id,
            "YOUTUBE_CLIENT_SECRET": youtube.client_secret,
            "YOUTUBE_REFRESH_TOKEN": youtube.refresh_token,
            "YOUTUBE_VIDEO_ID": VIDEO_ID,
            "YOUTUBE_API_BASE_URL": youtube.api_base,
            "GOOGLE_OAUTH_TOKEN_URL": youtube.token_url,
            "YOUTUBE_GRPC_TARGET": stream.target,
            "YOUTUBE_GRPC_INSECURE": "true",  # loopback only (the settings refuse it elsewhere)
            "PYTHONPATH": str(ROOT),
        }
        stream.push(_mention(0))  # said before the bot joined: history, not answered
        stream.close_after = 2  # the history, then one response: the stream closes
        proc = await spawn_chorus(["run"], env, tmp_path)
        try:
            await stream.wait_for(lambda: bool(stream.calls) and stream.calls[0].responses >= 1, 90)
            stream.push(_mention(1))
            await youtube.wait_for(lambda: len(youtube.inserted) == 1, limit=90)
            # the first connection has closed; the process reconnects with the page token
            await stream.wait_for(lambda: len(stream.calls) >= 2, 90)
            stream.push(_mention(2))
            await youtube.wait_for(lambda: len(youtube.inserted) == 2, limit=90)
            assert proc.returncode is None
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(proc.communicate(), 60)
            await stream.close()
        assert proc.returncode == 0, err.decode()[-3000:]
        texts = [b["snippet"]["textMessageDetails"]["messageText"] for b in youtube.inserted]
        assert texts == ["@Alice First answer.", "@Alice Second answer."]
        assert youtube.calls["list"] == 0  # the chat was never polled
        assert [c.page_token for c in stream.calls][:2] == [None, "pos-2"]
        assert all(c.authorization.startswith("Bearer ya29.") for c in stream.calls)
        assert b"following youtube live chat" in err
