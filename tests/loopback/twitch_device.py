"""The loopback Twitch server with the Device Code Grant Flow, as ``chorus auth twitch`` meets it.

``POST /id/oauth2/device`` (form ``client_id``, ``scopes``) answers ``device_code``,
``user_code``, ``verification_uri``, ``expires_in`` and ``interval``. ``POST /id/oauth2/token``
with ``grant_type=urn:ietf:params:oauth:grant-type:device_code`` (and the client secret of a
Confidential application, when sent) answers in Twitch's shape,
``{"status": 400, "message": "authorization_pending"}`` until the test (playing the operator at
twitch.tv/activate) calls ``approve(user_code)`` or ``deny(user_code)``; then the token pair
(granted on the server, so Helix, validate and refresh accept it), or ``access_denied``. A code
older than its ``expires_in`` answers ``invalid device code``. ``slow_down_polls`` makes the
next polls answer ``slow_down``, ``failing_polls`` 503; each poll's time is kept in ``polls`` so a test can check the
interval was honoured. Every other grant is the base server's.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

from aiohttp import web

from tests.loopback.twitch_server import CLIENT_ID, CLIENT_SECRET, TwitchServer

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@dataclass
class DeviceCode:
    device_code: str
    user_code: str
    scopes: tuple[str, ...]
    created: float
    user_id: str | None = None  # approved by this user
    denied: bool = False
    redeemed: bool = False  # a device code gives one token pair
    polls: list[float] = field(default_factory=list)


class TwitchDeviceServer(TwitchServer):
    def __init__(self, *, interval: int = 1, expires_in: int = 1800) -> None:
        super().__init__()
        self.interval = interval
        self.expires_in = expires_in
        self.devices: dict[str, DeviceCode] = {}  # device_code -> its state
        self.slow_down_polls = 0
        self.failing_polls = 0  # the next polls answer 503, as Twitch does in an outage
        self.grant_scopes: tuple[str, ...] | None = None  # None: the scopes asked for
        self.issued: list[tuple[str, str]] = []  # (access, refresh) per approved device code
        self._numbers = itertools.count(1)

    def routes(self) -> list[web.RouteDef]:
        return [web.post("/id/oauth2/device", self._device), *super().routes()]

    def _by_user_code(self, user_code: str) -> DeviceCode:
        (device,) = [d for d in self.devices.values() if d.user_code == user_code]
        return device

    async def approve(self, user_code: str, user_id: str) -> None:
        self._by_user_code(user_code).user_id = user_id
        await self._changed()

    async def deny(self, user_code: str) -> None:
        self._by_user_code(user_code).denied = True
        await self._changed()

    @property
    def polls(self) -> list[float]:
        return [t for d in self.devices.values() for t in d.polls]

    async def _device(self, request: web.Request) -> web.Response:
        await self.record(request)
        form = await request.post()
        if form.get("client_id") != CLIENT_ID:
            return web.json_response({"status": 400, "message": "invalid client"}, status=400)
        n = next(self._numbers)
        device = DeviceCode(
            f"device-code-{n}",
            f"ABCD{n:04d}",
            tuple(str(form.get("scopes", "")).split()),
            time.monotonic(),
        )
        self.devices[device.device_code] = device
        return web.json_response(
            {
                "device_code": device.device_code,
                "expires_in": self.expires_in,
                "interval": self.interval,
                "user_code": device.user_code,
                "verification_uri": (
                    f"https://www.twitch.tv/activate?public=true&device-code={device.user_code}"
                ),
            }
        )

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        if form.get("grant_type") != DEVICE_GRANT:
            return await super()._token(request)
        await self.record(request)
        device = self.devices.get(str(form.get("device_code", "")))
        if device is not None:
            device.polls.append(time.monotonic())
            await self._changed()
        if (
            device is None
            or device.redeemed
            or form.get("client_id") != CLIENT_ID
            or form.get("client_secret", CLIENT_SECRET) != CLIENT_SECRET
            or time.monotonic() - device.created > self.expires_in
        ):
            return self._refused("invalid device code")
        if self.failing_polls:
            self.failing_polls -= 1
            body = {"status": 503, "message": "Service Unavailable"}
            return web.json_response(body, status=503)
        if self.slow_down_polls:
            self.slow_down_polls -= 1
            return self._refused("slow_down")
        if device.denied:
            return self._refused("access_denied")
        if device.user_id is None:
            return self._refused("authorization_pending")
        n = next(self._numbers)
        access, refresh = f"dcf-access-{n}", f"dcf-refresh-{n}"
        self.grant(device.user_id, access, refresh)
        scopes = self.grant_scopes if self.grant_scopes is not None else device.scopes
        self.tokens[access].scopes = scopes
        self.issued.append((access, refresh))
        device.redeemed = True
        return web.json_response(
            {
                "access_token": access,
                "expires_in": 14_400,
                "refresh_token": refresh,
                "scope": list(scopes),
                "token_type": "bearer",
            }
        )

    def _refused(self, message: str) -> web.Response:
        return web.json_response({"status": 400, "message": message}, status=400)


__all__ = ["DEVICE_GRANT", "DeviceCode", "TwitchDeviceServer"]
