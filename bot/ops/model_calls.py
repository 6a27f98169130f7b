"""Every model call Chorus makes besides a turn's answer, against the deployment's daily cost cap.

A turn's answer reserves its cost in its quota admission and settles it in its commit
(``bot.quota.users``, ``bot.state.turn.CostSettle``), the moderation model's calls for that turn
included (``bot.safety.gate``: they run inside an admitted turn). Everything else goes through
here: the insights analyses, the day's summaries and community notes, and every embedding (the
message's query on the reply path, the notes', the summaries', the knowledge base's). Each call first reserves its estimated cost (``PriceTable.estimate``,
``estimate_embedding``) in the shared ledger (``bot.state.cost``), which refuses once the day's
spend plus the reservations in flight reach the cap: the call is not made and
``CostCapReached`` says so (the caller logs and counts it; background work waits for the next
UTC day). A call made is settled with its real cost (an embedding's is its estimate: the vendors
report no usage for them); a call that fails releases its reservation.

A model without a price (a local model, an unknown one) costs nothing and is not reserved. With
no cap (CHORUS_QUOTA_COST_USD_DAY unset) nothing here runs: ``Spend.for_settings`` is None and
the callers use their model as it is.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import datetime
from typing import Protocol

from bot.events import utcnow
from bot.llm.base import Provider
from bot.llm.pricing import PriceTable, load_prices
from bot.llm.types import LLMRequest, LLMResponse, StreamEvent
from bot.settings import Settings
from bot.state.client import Redis
from bot.state.client import StoreError as RedisError
from bot.state.cost import CostLedger, Reservation, Spent, cost_day, micro

log = logging.getLogger("chorus.cost")

Clock = Callable[[], datetime]


class CostCapReached(Exception):
    """The deployment's daily cost cap is reached: the model call was not made."""

    def __init__(self, what: str, resets_in: int) -> None:
        super().__init__(
            f"the daily cost cap is reached; {what} waits {resets_in} s for the next UTC day"
        )
        self.what = what
        self.resets_in = resets_in


class Embeds(Protocol):
    """What an embedder is (``bot.memory.vectors.Embedder``, structurally)."""

    name: str

    async def embed(self, texts: Sequence[str]) -> list[list[float]]: ...

    async def aclose(self) -> None: ...


class Spend:
    """The cost cap as the model calls outside a turn meet it: reserve, then settle or release."""

    def __init__(
        self,
        ledger: CostLedger,
        prices: PriceTable,
        cap_usd: float,
        *,
        clock: Clock = utcnow,
    ) -> None:
        self.ledger = ledger
        self.prices = prices
        self.cap = micro(cap_usd)
        self.clock = clock

    @classmethod
    def for_settings(
        cls, settings: Settings, redis: Redis, prices: PriceTable | None = None
    ) -> Spend | None:
        """The deployment's, or None when it sets no daily cost cap. ``prices``: the table the
        metrics use; else CHORUS_PRICES's."""
        cap = settings.quota.cost_usd_per_day
        if cap is None:
            return None
        ledger = CostLedger(redis, settings.state.bus_namespace)
        return cls(ledger, prices or load_prices(settings.metrics.prices), cap)

    async def reserve(self, usd: float, what: str) -> Reservation:
        """Hold ``usd`` for a call of ``what``; ``CostCapReached`` when the cap is reached."""
        now = self.clock()
        reservation = self.ledger.reservation(f"{what}:{uuid.uuid4().hex}", micro(usd), now)
        if not await self.ledger.reserve(reservation, self.cap, now):
            raise CostCapReached(what, cost_day(now)[1])
        return reservation

    async def settle(self, reservation: Reservation, usd: float | None) -> None:
        """The call is done and cost ``usd``; a store that fails lets the hold lapse."""
        try:
            await self.ledger.settle(reservation, micro(usd))
        except RedisError:
            log.warning("could not settle a model call's cost; its reservation lapses",
                        exc_info=True)  # fmt: skip

    async def release(self, reservation: Reservation) -> None:
        """The call failed: nothing is spent (a store that fails lets the hold lapse)."""
        with contextlib.suppress(RedisError):
            await self.ledger.release(reservation)

    async def today(self) -> Spent:
        """Today's spend and reservations."""
        return await self.ledger.today(self.clock())

    def provider(self, provider: Provider, what: str) -> Provider:
        """``provider`` with each call reserved and settled."""
        return MeteredProvider(provider, self, what)

    def embedder(self, embedder: Embeds, what: str = "embedding") -> Embeds:
        """``embedder`` with each call reserved and settled."""
        return MeteredEmbedder(embedder, self, what)


def metered_embedder(spend: Spend | None, embedder: Embeds | None) -> Embeds | None:
    """``embedder`` under ``spend`` (as it is without a cap or without an embedder)."""
    return embedder if spend is None or embedder is None else spend.embedder(embedder)


class MeteredProvider:
    """A provider whose calls are reserved before and settled after (``Spend``)."""

    def __init__(self, inner: Provider, spend: Spend, what: str) -> None:
        self.inner = inner
        self.spend = spend
        self.what = what

    @property
    def name(self) -> str:
        return self.inner.name

    async def complete(self, request: LLMRequest) -> LLMResponse:
        usd = self.spend.prices.estimate(request)
        if usd is None:
            return await self.inner.complete(request)
        reservation = await self.spend.reserve(usd, self.what)
        try:
            response = await self.inner.complete(request)
        except BaseException:
            await self.spend.release(reservation)
            raise
        await self.spend.settle(reservation, self.spend.prices.cost(request.model, response.usage))
        return response

    async def stream(self, request: LLMRequest) -> AsyncIterator[StreamEvent]:
        usd = self.spend.prices.estimate(request)
        reservation = None if usd is None else await self.spend.reserve(usd, self.what)
        cost: float | None = None
        try:
            async for event in self.inner.stream(request):
                if isinstance(event, LLMResponse):
                    cost = self.spend.prices.cost(request.model, event.usage)
                yield event
        except BaseException:
            if reservation is not None:
                await self.spend.release(reservation)
            raise
        if reservation is not None:
            await self.spend.settle(reservation, cost)

    async def aclose(self) -> None:
        await self.inner.aclose()


class MeteredEmbedder:
    """An embedder whose calls are reserved before and settled after (``Spend``)."""

    def __init__(self, inner: Embeds, spend: Spend, what: str) -> None:
        self.inner = inner
        self.spend = spend
        self.what = what
        self.name = inner.name

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        usd = self.spend.prices.estimate_embedding(self.name, texts)
        if usd is None:
            return await self.inner.embed(texts)
        reservation = await self.spend.reserve(usd, self.what)
        try:
            vectors = await self.inner.embed(texts)
        except BaseException:
            await self.spend.release(reservation)
            raise
        await self.spend.settle(reservation, usd)
        return vectors

    async def aclose(self) -> None:
        await self.inner.aclose()
