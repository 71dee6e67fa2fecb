"""The dated Spot price table (tts_fleet/cost/data/spot_prices.json): per region and instance
type, the range of Spot prices across the region's zones at one snapshot, its table price (the
middle of the range) and, where known, the Spot Advisor interruption band. Sources and date are
in the file. The simulator charges a Spot pool this price (through tts_fleet/cost/pools.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

BASE_REGION = "us-east-1"
# Spot Instance Advisor's bands of the trailing month's interruption frequency, in percent.
# https://aws.amazon.com/ec2/spot/instance-advisor/
BANDS = ("<5", "5-10", "10-15", "15-20", ">20")


@dataclass(frozen=True)
class SpotPrice:
    instance_type: str
    low_usd: float  # per instance-hour, the cheapest zone
    high_usd: float  # the dearest zone
    interruption_band: str | None  # one of BANDS; None: the feed had no entry

    @property
    def usd_per_hour(self) -> float:
        """The table price: the middle of the zones' range."""
        return round((self.low_usd + self.high_usd) / 2, 4)


@dataclass(frozen=True)
class SpotTable:
    region: str  # the region asked for
    as_of: str
    sources: dict[str, str]
    prices: dict[str, SpotPrice]  # by instance type
    fallback: bool  # the region has no table: us-east-1's prices stand in

    def price(self, instance_type: str) -> SpotPrice | None:
        return self.prices.get(instance_type)


@cache
def _document() -> dict[str, Any]:
    text = resources.files("tts_fleet.cost").joinpath("data/spot_prices.json").read_text()
    document: dict[str, Any] = json.loads(text)
    return document


def load_spot_prices(region: str = BASE_REGION) -> SpotTable:
    """The region's Spot table; a region the file does not price falls back to us-east-1's,
    and says so (`fallback`)."""
    doc = _document()
    rows = doc["regions"].get(region)
    fallback = rows is None
    if rows is None:
        rows = doc["regions"][BASE_REGION]
    prices = {name: _price(name, row) for name, row in rows.items()}
    return SpotTable(region, doc["as_of"], dict(doc["sources"]), prices, fallback)


def _price(name: str, row: dict[str, Any]) -> SpotPrice:
    band = row.get("interruption_band")
    if band is not None and band not in BANDS:
        raise ValueError(f"spot_prices.json: {name}: interruption_band {band!r} not one of {BANDS}")
    low, high = float(row["low"]), float(row["high"])
    if not 0 < low <= high:
        raise ValueError(f"spot_prices.json: {name}: needs 0 < low <= high ({low}, {high})")
    return SpotPrice(name, low, high, band)
