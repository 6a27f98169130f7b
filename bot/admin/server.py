"""The dashboard's web app: routes, the login, the changes (each audited), the server's life.

Pages are GET and change nothing; every change is a POST with the session's CSRF token (or a
Bearer token), goes through the same path its chat command takes, is recorded in the audit
trail (``direction="admin"``), and redirects back (POST-redirect-GET) with a notice this server
signed (bot/admin/notices.py). Templates are loaded from ``prompts/admin/`` with autoescaping
on, and never receive a secret: the settings page gets masked values only, and every response
passes through the masker on its way out (bot/admin/masking.py). Requests pass, in order,
through the trusted proxy's view of the client (bot/admin/proxy.py), the masker, and the login
(bot/admin/auth.py, sessions ended early in bot/admin/sessions.py).
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
from aiohttp import web

from bot.admin import (
    accounts,
    charts,
    charts_page,
    chat_page,
    commands_page,
    config_pages,
    knowledge_page,
    logs_page,
    masking,
    moderation_page,
    overlay,
    plugins_page,
    views,
)
from bot.admin.auth import ACCOUNT_KEY, COOKIE, OPEN_PATHS, ROLE_KEY, SESSION_KEY, Auth, Middleware
from bot.admin.login import LoginGuard
from bot.admin.notices import Notices
from bot.admin.proxy import Proxies
from bot.admin.sessions import Sessions
from bot.admin.views import Sources
from bot.engagement.policy import apply_pause
from bot.events import Author, ChatMessage, ConversationKey
from bot.memory.entries import StaleEntry, delete_entry, edit_entry
from bot.safety.audit import AuditEntry
from bot.settings import ConfigError
from bot.settings.ops import LOOPBACK_HOSTS, AdminSettings
from bot.state.admin_accounts import AccountRecords
from bot.state.conduits import RedisConduitStore, normal_channel
from bot.state.config_reloads import ConfigReloads
from bot.state.engagement import Changes, RedisLiveStore

log = logging.getLogger("chorus.admin")

TEMPLATES = Path(__file__).resolve().parent.parent.parent / "prompts" / "admin"
SRC = web.AppKey("sources", Sources)
PAGES: tuple[str, ...] = ("overview", "conversations", "people", "live", "moderation", "voice")
PAGES += ("insights", "logs", "settings", "config")
PAGES_MORE: tuple[str, ...] = ("commands",)  # pages of the built-in plugins
PAGES_MORE += ("charts", "plugins", "knowledge", "chat")


def environment() -> jinja2.Environment:
    """Templates from ``prompts/admin`` (found the way ``prompts`` finds its files: next to it)."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["sparkline"] = charts.sparkline
    env.globals["allows"] = accounts.allows
    env.filters["q"] = lambda text: quote(str(text), safe="")
    env.filters["when"] = lambda at: datetime.fromtimestamp(float(at), UTC).strftime(
        "%Y-%m-%d %H:%M:%S"
    )
    return env


class AdminServer:
    """``await AdminServer(...).start()``; ``aclose`` stops it. Port 0 binds a free port."""

    def __init__(
        self,
        sources: Sources,
        token: str,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        trust_proxy: tuple[str, ...] = (),
    ):
        self.sources = sources
        self.auth = Auth(token)
        namespace = sources.audit.namespace
        self.guard = LoginGuard(self.auth, sources.redis, namespace=namespace)
        self.sessions = Sessions(self.auth, sources.redis, namespace=namespace)
        self.auth.bearer_check = self.bearer
        self.auth.session_check = self.sessions.valid
        self.accounts = AccountRecords(sources.redis, namespace=namespace)
        self.auth.role_of = self.role_of
        self.notices = Notices(token)
        self.proxies = Proxies(trust_proxy)
        self._token = token
        self.host = host
        self.port = port
        self.env = environment()
        self._runner: web.AppRunner | None = None

    @classmethod
    def from_settings(cls, settings: AdminSettings, sources: Sources) -> AdminServer | None:
        if not settings.enabled:
            return None
        if settings.token is None:  # the settings refuse this already; never start open
            raise ConfigError("CHORUS_ADMIN_TOKEN is required when CHORUS_ADMIN_PORT is set")
        token = settings.token.get_secret_value()
        return cls(sources, token, settings.host, settings.port, trust_proxy=settings.trust_proxy)

    def app(self) -> web.Application:
        middlewares = [
            self.proxies.middleware(),
            masking.middleware(self.masker),
            self.auth.middleware(),
            self.roles(),
        ]
        app = web.Application(middlewares=middlewares)  # type: ignore[arg-type]
        app[SRC] = self.sources
        app.on_startup.append(self._started)
        get, post = web.get, web.post
        app.add_routes(
            [
                get("/login", self.login_page),
                post("/login", self.login),
                post("/logout", self.logout),
                get("/static/admin.css", self.css),
                get("/", self.overview),
                get("/conversations", self.conversations),
                get("/conversations/{conv}", self.conversation),
                get("/people", self.people),
                get("/people/{platform}/{user_id}", self.person),
                get("/people/{platform}/{user_id}/export.json", self.export),
                post("/people/{platform}/{user_id}/entry", self.entry),
                post("/people/{platform}/{user_id}/forget", self.forget),
                get("/live", self.live),
                post("/live/{conv}/pause", self.pause),
                post("/live/twitch/channels", self.twitch_channel),
                get("/insights", self.insights),
                get("/settings", self.settings),
                post("/settings/reload", self.reload),
                get("/logs", self.logs),
                get("/moderation", self.moderation),
                post("/moderation/undo", self.moderation_undo),
                get("/config", self.config),
                post("/config", self.config_submit),
                get("/commands", self.commands),
                post("/commands", self.commands_submit),
            ]
        )
        voice = overlay.Overlay(
            self.sources.redis, lambda: self.sources.settings, render=self.render, audit=self.audit
        )
        app.add_routes(voice.routes())
        app.on_cleanup.append(voice.aclose)
        app.add_routes([get("/charts", self.charts)])
        app.add_routes([get("/plugins", self.plugins), post("/plugins", self.plugins_submit)])
        app.add_routes(
            [
                get("/knowledge", self.knowledge),
                post("/knowledge/upload", self.knowledge_upload),
                post("/knowledge/reindex", self.knowledge_reindex),
                post("/knowledge/url", self.knowledge_url),
            ]
        )
        app.add_routes([get("/chat", self.chat), post("/chat", self.chat_send)])
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        server = getattr(site, "_server", None)
        if server is not None and server.sockets:
            self.port = server.sockets[0].getsockname()[1]
        exposed = "" if self.host in LOOPBACK_HOSTS else " (reachable from the network)"
        log.info("admin dashboard at %s%s", self.url, exposed)
        if self.host not in LOOPBACK_HOSTS and not self.proxies:
            log.warning(
                "admin dashboard: CHORUS_ADMIN_HOST=%s is reachable from the network over plain "
                "HTTP with no trusted proxy: the admin token and the session cookie cross the "
                "network unencrypted, readable and reusable by anyone on the path, and every "
                "client behind a proxy shares one login limit. Serve it through a TLS reverse "
                "proxy listed in CHORUS_ADMIN_TRUST_PROXY, or bind CHORUS_ADMIN_HOST=127.0.0.1",
                self.host,
            )

    async def role_of(self, account: str) -> str | None:
        found = await self.accounts.get(account)
        return found[0] if found is not None else None

    def roles(self) -> Middleware:
        """A change needs its role (bot/admin/accounts.py ``NEEDS``); a refusal is a 403 and
        an audit entry naming the account."""

        @web.middleware
        async def check(request: web.Request, handler: Any) -> web.StreamResponse:
            if request.method == "POST" and request.path not in OPEN_PATHS | {"/logout"}:
                need, role = accounts.needed(request.path), request.get(ROLE_KEY, "")
                if not accounts.allows(role, need):
                    self.audit(
                        request,
                        "admin:forbidden",
                        "refused",
                        conversation=request.path[:200],
                        detail=f"{role or 'nobody'} needs {need}",
                    )
                    await self.sources.audit.flush()
                    raise web.HTTPForbidden(
                        text=f"your role ({role}) cannot do this: it needs {need}"
                    )
            result: web.StreamResponse = await handler(request)
            return result

        return check

    async def _started(self, app: web.Application) -> None:
        await self.sessions.started()

    def masker(self) -> masking.Masker:
        """The masker of every response, with the secrets as the settings say now."""
        return masking.Masker([*self.sources.settings.secret_values(), self._token])

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def aclose(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # -- rendering --------------------------------------------------------------------------------
    def render(self, request: web.Request, template: str, **values: Any) -> web.Response:
        sid = request.get(SESSION_KEY, "")
        values.setdefault("page", template)
        values.setdefault("role", request.get(ROLE_KEY, ""))
        values.setdefault("account", request.get(ACCOUNT_KEY, ""))
        body = self.env.get_template(f"{template}.html").render(
            csrf=self.auth.csrf_for(sid) if sid else "",
            pages=PAGES + PAGES_MORE,
            notice=self.notices.read(request.query.get("notice", "")),
            **values,
        )
        return web.Response(text=body, content_type="text/html")

    def audit(
        self, request: web.Request, rule: str, action: str, who: str = "", **where: Any
    ) -> None:
        """Record a change in the audit trail (who: the session, ``bearer`` or, for a failed
        login, the client's address; never a token)."""
        sid = request.get(SESSION_KEY, "")
        entry = AuditEntry(
            at_ms=int(time.time() * 1000),
            direction="admin",
            rule=rule,
            action=action,
            user_name=_who_did(request, who, sid),
            **where,
        )
        self.sources.audit.record(entry)

    # -- login ------------------------------------------------------------------------------------
    async def login_page(self, request: web.Request) -> web.Response:
        return self.login_form(request)

    def login_form(
        self, request: web.Request, status: int = 200, problem: str = "", retry: int = 0
    ) -> web.Response:
        """The login page with a fresh (or the browser's still valid) pre-session CSRF token."""
        nonce, cookie = self.guard.form_token(request)
        retry_at = datetime.fromtimestamp(time.time() + retry, UTC).strftime("%H:%M:%S UTC")
        response = self.render(
            request, "login", problem=problem, login_csrf=nonce, retry=retry, retry_at=retry_at
        )
        response.set_status(status)
        if cookie is not None:
            self.guard.set_cookie(response, request, cookie)
        if retry:
            response.headers["Retry-After"] = str(retry)
        return response

    async def login(self, request: web.Request) -> web.StreamResponse:
        """CSRF first (no Redis), then one attempt reserved against the address's limit, then
        the token. A failure is audited with the address, never with what was typed."""
        form = await request.post()
        if not self.guard.token_ok(request, str(form.get("csrf", ""))):
            return self.login_form(request, 403, "expired")
        address = request.remote or "unknown"
        attempt, retry = await self.guard.attempt(address)
        if not attempt:
            log.warning("admin dashboard: logins from %s refused for %ds", address, retry)
            return self.login_form(request, 429, "limited", retry)
        name = str(form.get("name", "")).strip().lower()
        secret = str(form.get("token", ""))
        role = await accounts.check_login(self.accounts, name, secret) if name else None
        if role is None and (name or not self.auth.token_ok(secret)):
            blocked = await self.guard.failed(address, attempt)
            log.warning("admin dashboard: a login with a wrong token from %s", address)
            self.audit(request, "admin:login", "blocked" if blocked else "failed", who=address)
            await self.sources.audit.flush()
            return self.login_form(request, 401, "wrong")
        await self.guard.succeeded(address)
        await self.sessions.issued()
        response = web.Response(status=303, headers={"Location": "/"})
        self.auth.set_cookie(response, request, account=name if role else "")
        return response

    async def bearer(self, request: web.Request, token: str) -> None:
        """A script's token, under the login's rate limit, the same way: one attempt reserved
        atomically before the token is compared (refused while the address is blocked,
        whatever the token); a wrong one stays as a failure and is audited, a right one
        clears the address's failures."""
        address = request.remote or "unknown"
        attempt, retry = await self.guard.attempt(address)
        if not attempt:
            raise web.HTTPTooManyRequests(
                text=f"too many failed logins from {address}; try again in {retry} seconds",
                headers={"Retry-After": str(retry)},
            )
        if not self.auth.token_ok(token):
            blocked = await self.guard.failed(address, attempt)
            log.warning("admin dashboard: a wrong Bearer token from %s", address)
            self.audit(request, "admin:login", "blocked" if blocked else "failed", who=address)
            await self.sources.audit.flush()
            raise web.HTTPUnauthorized(text="wrong token")
        await self.guard.succeeded(address)

    async def logout(self, request: web.Request) -> web.StreamResponse:
        """Ends the session for every process (a copied cookie is refused too), then deletes
        the browser's cookie."""
        session = self.auth.session(request.cookies.get(COOKIE))
        if session is not None and request.get(SESSION_KEY):
            await self.sessions.revoke(session)
        response = web.Response(status=303, headers={"Location": "/login"})
        response.del_cookie(COOKIE, path="/")
        return response

    async def css(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(TEMPLATES / "admin.css")

    # -- pages ------------------------------------------------------------------------------------
    async def overview(self, request: web.Request) -> web.Response:
        data = await views.overview(self.sources, datetime.now(UTC))
        return self.render(request, "overview", **data)

    async def conversations(self, request: web.Request) -> web.Response:
        data = await views.conversations(self.sources, request.query.get("platform"))
        return self.render(request, "conversations", **data)

    async def conversation(self, request: web.Request) -> web.Response:
        data = await views.conversation(self.sources, _conv(request))
        return self.render(request, "conversation", page="conversations", **data)

    async def people(self, request: web.Request) -> web.Response:
        query, platform = request.query.get("q", ""), request.query.get("platform", "")
        return self.render(request, "people", **await views.people(self.sources, query, platform))

    async def person(self, request: web.Request) -> web.Response:
        platform, user_id = _who(request)
        data = await views.person(self.sources, platform, user_id, request.query.get("name", ""))
        return self.render(request, "person", page="people", **data)

    async def export(self, request: web.Request) -> web.Response:
        platform, user_id = _who(request)
        memory = self.sources.memory
        buffer = await memory.load(platform, user_id)
        data = views.export(buffer, await memory.conversations(platform, user_id))
        self.audit(request, "memory:export", "exported", platform=platform, user_id=user_id)
        return web.Response(
            text=json.dumps(data, indent=2, ensure_ascii=False),
            content_type="application/json",
            headers={"Content-Disposition": f'attachment; filename="{platform}-memory.json"'},
        )

    async def live(self, request: web.Request) -> web.Response:
        twitch = self.sources.settings.twitch
        joinable = twitch.configured and twitch.transport == "conduit"
        found = await views.live(self.sources, time.time())
        return self.render(request, "live", **found, twitch_joinable=joinable)

    async def twitch_channel(self, request: web.Request) -> web.StreamResponse:
        """Join or leave a Twitch channel (conduit transport): what ``chorus twitch join`` does;
        the gateways follow within a third of a shard lease."""
        form = await request.post()
        action = "leave" if str(form.get("action", "")) == "leave" else "join"
        twitch = self.sources.settings.twitch
        try:
            channel = normal_channel(str(form.get("channel", "")))
            if not (twitch.configured and twitch.transport == "conduit"):
                raise ValueError("channels change at run time only with TWITCH_TRANSPORT=conduit")
        except ValueError as exc:
            raise web.HTTPSeeOther(
                f"/live?{self.notices.issue('invalid', reason=str(exc))}"
            ) from None
        store, app = RedisConduitStore(self.sources.redis), (twitch.client_id or "").strip()
        if action == "join":
            await store.join_channel(app, channel)
        else:
            await store.leave_channel(app, channel)
        done = "twitch_joined" if action == "join" else "twitch_left"
        self.audit(request, "live:twitch", done, platform="twitch", conversation=channel)
        await self.sources.audit.flush()
        raise web.HTTPSeeOther(f"/live?{self.notices.issue(done, channel=channel)}")

    async def insights(self, request: web.Request) -> web.Response:
        data = await views.insights(self.sources, datetime.now(UTC))
        return self.render(request, "insights", **data)

    async def settings(self, request: web.Request) -> web.Response:
        scope = request.query.get("scope", "").strip()
        described, problem = "", ""
        if scope:
            from bot.router.scope_text import describe_scope  # `chorus config --scope`

            try:
                described = _masked_scope(describe_scope(self.sources.settings, scope))
            except ValueError as exc:
                problem = str(exc)
        return self.render(
            request,
            "settings",
            rows=views.settings_rows(self.sources),
            scope=scope,
            described=described,
            problem=problem,
            can_reload=self.sources.reload is not None,
        )

    async def logs(self, request: web.Request) -> web.Response:
        return self.render(request, "logs", **await logs_page.logs(self.sources, request.query))

    async def moderation(self, request: web.Request) -> web.Response:
        return self.render(request, "moderation", **await moderation_page.moderation(self.sources))

    async def moderation_undo(self, request: web.Request) -> web.StreamResponse:
        """Untimeout or unban from the Moderation page, through the platform's gateway."""
        form = {k: str(v) for k, v in (await request.post()).items() if k != "csrf"}
        who = _who_did(request, "", request.get(SESSION_KEY, ""))
        try:
            done = await moderation_page.undo(self.sources, form, who)
        except LookupError as exc:
            raise web.HTTPConflict(text=str(exc)) from None
        except ValueError as exc:
            raise web.HTTPBadRequest(text=str(exc)) from None
        user = done.user_id or ""
        conv = str(done.conversation)
        self.audit(request, "moderation:undo", done.action, conversation=conv, user_id=user)
        await self.sources.audit.flush()
        notice = self.notices.issue("undone", action=done.action, user=user)
        raise web.HTTPSeeOther(f"/moderation?{notice}")

    async def config(self, request: web.Request) -> web.Response:
        can_edit = accounts.allows(request.get(ROLE_KEY, ""), "admin")
        return await config_pages.page(self.sources, request, self.render, can_edit=can_edit)

    async def charts(self, request: web.Request) -> web.Response:
        span = request.query.get("span", "24h")
        data = await charts_page.charts(self.sources, span, datetime.now(UTC))
        return self.render(request, "charts", **data)

    async def plugins(self, request: web.Request) -> web.Response:
        can_edit = accounts.allows(request.get(ROLE_KEY, ""), "admin")
        return await plugins_page.page(self.sources, request, self.render, can_edit=can_edit)

    async def knowledge(self, request: web.Request) -> web.Response:
        can_edit = accounts.allows(request.get(ROLE_KEY, ""), "admin")
        return await knowledge_page.page(self.sources, request, self.render, can_edit=can_edit)

    async def chat(self, request: web.Request) -> web.Response:
        available = isinstance(self.sources.chat, chat_page.ChatParts)
        return await chat_page.page(request, self.render, available=available)

    # -- changes ----------------------------------------------------------------------------------
    async def chat_send(self, request: web.Request) -> web.StreamResponse:
        parts = self.sources.chat
        if not isinstance(parts, chat_page.ChatParts):
            raise web.HTTPConflict(text="this process runs no router; chat from a chat worker")
        account = request.get(ACCOUNT_KEY, "") or "admin"
        self.audit(request, "chat:test", "asked", conversation=str(request.path))
        await self.sources.audit.flush()
        mask = self.masker()
        return await chat_page.send(parts, self.sources, request, self.render, account, mask)

    def knowledge_notice(self, text: str) -> str:
        return self.notices.issue("knowledge", text=text[:300])

    async def knowledge_upload(self, request: web.Request) -> web.StreamResponse:
        return await knowledge_page.upload(self.sources, request, self.audit, self.knowledge_notice)

    async def knowledge_reindex(self, request: web.Request) -> web.StreamResponse:
        return await knowledge_page.reindex(
            self.sources, request, self.audit, self.knowledge_notice
        )

    async def knowledge_url(self, request: web.Request) -> web.StreamResponse:
        secrets = [*self.sources.settings.secret_values(), self._token]
        return await knowledge_page.add_url(
            self.sources, request, self.audit, self.knowledge_notice, self.masker(), secrets
        )

    async def plugins_submit(self, request: web.Request) -> web.StreamResponse:
        saved = f"/plugins?{self.notices.issue('saved')}"
        secrets = [*self.sources.settings.secret_values(), self._token]
        return await plugins_page.submit(
            self.sources, request, self.render, self.audit, self.masker(), saved, secrets
        )

    async def commands(self, request: web.Request) -> web.Response:
        return self.render(
            request, "commands", **await commands_page.page(self.sources, request.query)
        )

    async def commands_submit(self, request: web.Request) -> web.StreamResponse:
        """Save or delete a channel's custom command (operator; audited)."""
        form = {k: str(v) for k, v in (await request.post()).items()}
        try:
            done, platform, channel, name = await commands_page.submit(self.sources, form)
        except ValueError as exc:
            notice = self.notices.issue("invalid", reason=str(exc))
        else:
            where = ConversationKey(platform=platform, channel=channel)
            self.audit(
                request,
                "commands:edit",
                done,
                platform=platform,
                conversation=str(where),
                detail=f"!{name}",
            )
            await self.sources.audit.flush()
            notice = self.notices.issue(f"command_{done}", name=name)
        place = (
            f"platform={quote(form.get('platform', ''))}&channel={quote(form.get('channel', ''))}"
        )
        raise web.HTTPSeeOther(f"/commands?{place}&{notice}")

    async def config_submit(self, request: web.Request) -> web.StreamResponse:
        saved = f"/config?{self.notices.issue('saved')}"
        return await config_pages.submit(
            self.sources,
            request,
            self.render,
            self.audit,
            self.masker(),
            saved,
            [*self.sources.settings.secret_values(), self._token],
        )

    async def entry(self, request: web.Request) -> web.StreamResponse:
        """Delete or edit one pin or recommendation (``WATCH``'d, checked against what the page
        showed: a stale page changes nothing)."""
        platform, user_id = _who(request)
        form = await request.post()
        kind, action = str(form.get("kind", "")), str(form.get("action", ""))
        seen, text = str(form.get("seen", "")), str(form.get("text", ""))
        index = str(form.get("index", ""))
        if kind not in ("pin", "rec") or action not in ("delete", "edit") or not index.isdigit():
            raise web.HTTPBadRequest(text="kind must be pin or rec, action delete or edit")
        now = datetime.now(UTC)

        def change(buffer: Any) -> Any:
            if action == "delete":
                return delete_entry(buffer, kind, int(index), seen)  # type: ignore[arg-type]
            return edit_entry(buffer, kind, int(index), seen, text, now)  # type: ignore[arg-type]

        try:
            await self.sources.memory.update(platform, user_id, change)
        except StaleEntry:
            raise web.HTTPSeeOther(_back(request, self.notices.issue("stale"))) from None
        except ValueError as exc:
            notice = self.notices.issue("invalid", reason=str(exc))
            raise web.HTTPSeeOther(_back(request, notice)) from None
        done = "deleted" if action == "delete" else "edited"
        self.audit(request, f"memory:{kind}", done, platform=platform, user_id=user_id)
        await self.sources.audit.flush()
        raise web.HTTPSeeOther(_back(request, self.notices.issue(f"{kind}_{done}")))

    async def forget(self, request: web.Request) -> web.StreamResponse:
        """Everything about a person, through ``/forget`` itself (its tombstone, the history,
        the queued insights job and the bus's copies)."""
        platform, user_id = _who(request)
        commands = self.sources.commands
        if commands is None:
            raise web.HTTPConflict(text="this process runs no router; forget from a chat worker")
        message = ChatMessage(
            platform=platform,
            id=f"admin-forget-{uuid.uuid4().hex}",
            conversation=ConversationKey(platform=platform, channel="admin-dashboard"),
            author=Author(id=user_id, display_name=str((await request.post()).get("name", ""))),
            text="/forget",
            is_direct=True,
        )
        summary = await commands.handle(message) or ""
        self.audit(request, "memory:forget", "forgotten", platform=platform, user_id=user_id)
        await self.sources.audit.flush()
        raise web.HTTPSeeOther(_back(request, self.notices.issue("forgotten", summary=summary)))

    async def pause(self, request: web.Request) -> web.StreamResponse:
        """Pause or resume a live channel: the durable keys ``!chorus pause`` writes (so every
        process honours it), and this process's ledger at once."""
        conv = _conv(request)
        paused = str((await request.post()).get("paused", "")) == "1"
        now = time.time()
        src = self.sources
        pause_seconds = round(src.settings.engagement.pause_hours * 3600)
        store = RedisLiveStore(src.redis, pause_seconds=pause_seconds)
        await store.save({conv: Changes(paused=paused, pause_at=now)}, now)
        if src.live is not None:
            state = src.live.engagement.states.get(conv)
            if state is not None and state.paused != paused:
                apply_pause(state, paused, now)
            src.live.durable.paused(conv, paused, now)
        action = "paused" if paused else "resumed"
        self.audit(request, "live:pause", action, platform=conv.platform, conversation=str(conv))
        await src.audit.flush()
        raise web.HTTPSeeOther(f"/live?{self.notices.issue(action, channel=conv.channel)}")

    async def reload(self, request: web.Request) -> web.StreamResponse:
        reload = self.sources.reload
        if reload is None:
            raise web.HTTPConflict(text="this process cannot reload its configuration")
        reload()
        await ConfigReloads(self.sources.redis).ask()  # every other process, within a second
        self.audit(request, "config:reload", "reloaded")
        await self.sources.audit.flush()
        raise web.HTTPSeeOther(f"/settings?{self.notices.issue('reloaded')}")


def _who_did(request: web.Request, address: str, sid: str) -> str:
    """The audit's "who": an address (a failed login), the account, the token's session, or a
    script's Bearer token; never a secret."""
    if address:
        return f"address:{address}"
    if request.get(ACCOUNT_KEY):
        return f"account:{request[ACCOUNT_KEY]}"
    return f"session:{sid[:6]}" if sid else "bearer"


def _conv(request: web.Request) -> ConversationKey:
    try:
        return ConversationKey.parse(request.match_info["conv"])
    except ValueError:
        raise web.HTTPNotFound(text="no such conversation") from None


def _who(request: web.Request) -> tuple[str, str]:
    return request.match_info["platform"], request.match_info["user_id"]


def _back(request: web.Request, notice: str) -> str:
    """The person's page with ``notice`` (``Notices.issue``'s query)."""
    platform, user_id = _who(request)
    return f"/people/{quote(platform)}/{quote(user_id, safe='')}?{notice}"


def _masked_scope(text: str) -> str:
    """``chorus config --scope`` masks secrets as ``set, ****abcd``; the dashboard shows none of
    a secret, not even its last characters."""
    import re

    return re.sub(r"set, \*\*\*\*\S*", "set, hidden", text)
