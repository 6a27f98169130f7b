"""How Slack's events reach bolt: an HTTP endpoint, or a Socket Mode websocket.

HTTP (``SLACK_SIGNING_SECRET``): an aiohttp server on ``SLACK_HTTP_PORT`` with bolt's own
request/response conversion on ``POST /slack/events`` (events and slash commands) and a
``GET /healthz`` for probes; installed in many workspaces, bolt's OAuth flow also answers
``GET /slack/install`` and ``GET /slack/oauth_redirect`` (its own state and cookie checks). Every request passes ``ingress.screen`` (signature, then shape)
before bolt parses it, and a body bolt cannot read (an id of another type than Slack sends)
is refused too, so junk gets a 4xx and one log line, never a 500. Socket Mode (``SLACK_APP_TOKEN``): slack-sdk's aiohttp client. The
app token is checked first with one ``apps.connections.open`` through the sender, because the
SDK's ``connect()`` retries a rejected token forever with nothing but a log line; the URL that
call returns is then used for the first connection. After that the SDK reconnects by itself:
on a server CLOSE or a ``disconnect`` message at once with a new URL, and after a failed
attempt or a stale ping every ``ping_interval`` seconds (a fixed interval, not exponential).
An envelope bolt cannot read, or answers with an error, is acknowledged anyway (Slack would
deliver it again and again) with one log line, the socket's counterpart of the HTTP 400.
"""

from __future__ import annotations

import logging
import time

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.adapter.socket_mode.async_internals import (
    run_async_bolt_app,
    send_async_response,
)
from slack_bolt.app.async_app import AsyncApp
from slack_bolt.response import BoltResponse
from slack_sdk.socket_mode.aiohttp import SocketModeClient
from slack_sdk.socket_mode.request import SocketModeRequest
from slack_sdk.socket_mode.response import SocketModeResponse

from adapters.slack.ingress import MAX_BODY_BYTES, Refusal, screen
from adapters.slack.sender import SlackSender, SlackSendError
from bot.settings import ConfigError
from bot.settings.slack import APPS_URL

log = logging.getLogger("chorus.slack")

EVENTS_PATH = "/slack/events"
AUTH_ERRORS = frozenset(
    {
        "invalid_auth",
        "not_authed",
        "account_inactive",
        "token_revoked",
        "token_expired",
        "not_allowed_token_type",
    }
)


async def serve_http(
    app: AsyncApp, host: str, port: int, signing_secret: str
) -> tuple[web.AppRunner, str]:
    """Start the Events API endpoint; returns its runner (to clean up) and its URL."""

    async def events(request: web.Request) -> web.Response:
        refused = screen(await request.read(), request.headers, signing_secret)
        if refused is None:
            try:
                response = await app.async_dispatch(await to_bolt_request(request))
                return await to_aiohttp_response(response)
            except Exception as exc:  # bolt assumes Slack's field types (an id a str or object)
                refused = Refusal(400, f"bolt cannot read the body ({type(exc).__name__}: {exc})")
        log.warning(
            "slack request refused",
            extra={"status": refused.status, "reason": refused.reason, "peer": request.remote},
        )
        return web.Response(status=refused.status, text=refused.reason)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    web_app = web.Application(client_max_size=MAX_BODY_BYTES)
    web_app.add_routes([web.post(EVENTS_PATH, events), web.get("/healthz", health)])
    flow = app.oauth_flow
    if flow is not None:  # installed in many workspaces: bolt's install and redirect pages

        async def install(request: web.Request) -> web.Response:
            return await to_aiohttp_response(
                await flow.handle_installation(await to_bolt_request(request))
            )

        async def redirect(request: web.Request) -> web.Response:
            return await to_aiohttp_response(
                await flow.handle_callback(await to_bolt_request(request))
            )

        web_app.add_routes(
            [web.get(flow.install_path, install), web.get(flow.redirect_uri_path, redirect)]
        )
    runner = web.AppRunner(web_app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    bound_host, bound_port = runner.addresses[0][:2]
    url = f"http://{bound_host}:{bound_port}{EVENTS_PATH}"
    log.info("slack events api listening", extra={"url": url})
    return runner, url


class _SocketHandler(AsyncSocketModeHandler):
    """bolt's Socket Mode handler; an envelope bolt cannot read is logged and acknowledged."""

    async def handle(self, client: SocketModeClient, req: SocketModeRequest) -> None:  # type: ignore[override]
        started = time.time()
        try:
            response: BoltResponse = await run_async_bolt_app(self.app, req)
        except Exception as exc:  # bolt assumes Slack's field types, as on the HTTP endpoint
            log.warning(
                "slack envelope skipped: bolt cannot read it",
                extra={"error": f"{type(exc).__name__}: {exc}"[:300]},
            )
            response = BoltResponse(status=400, body="")
        if response.status != 200:  # acknowledged, or Slack delivers it again
            await client.send_socket_mode_response(SocketModeResponse(envelope_id=req.envelope_id))
            return
        await send_async_response(client, req, response, started)


async def connect_socket(
    app: AsyncApp, sender: SlackSender, app_token: str, *, ping_interval: float
) -> AsyncSocketModeHandler:
    """Open a Socket Mode connection; ``ConfigError`` naming SLACK_APP_TOKEN if it is refused."""
    try:
        opened = await sender.request(
            lambda: sender.client.apps_connections_open(app_token=app_token),
            what="apps.connections.open",
        )
    except SlackSendError as exc:
        if exc.error in AUTH_ERRORS:
            raise ConfigError(
                f"SLACK_APP_TOKEN was rejected by Slack ({exc.error}); create an app-level "
                "token with the connections:write scope under Basic Information of your app "
                f"at {APPS_URL}, and enable Socket Mode"
            ) from None
        raise
    handler = _SocketHandler(
        app,
        app_token=app_token,
        web_client=sender.client,
        logger=logging.getLogger("chorus.slack.socket"),
        ping_interval=ping_interval,
    )
    handler.client.wss_uri = str(opened["url"])  # the SDK opens a new URL on each reconnect
    await handler.connect_async()  # type: ignore[no-untyped-call]
    log.info("slack socket mode connected")
    return handler
