"""The demo's simulated external world: attractions, hotels and a booking system that outlives the
agent process (its own SQLite file), so duplicate bookings and over-budget stays are measurable.

Like a real booking API it does NOT de-duplicate: booking the same thing twice makes two
bookings — exactly-once is the agent's job (the ledger). Each booking stores the caller's
``client_ref`` so a reconcile hook can ask "did my booking go through?" after a crash.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ATTRACTIONS: dict[str, dict[str, Any]] = {
    "Senso-ji": {"ticket": 0, "hours": "6:00-17:00", "area": "Asakusa"},
    "Akihabara": {"ticket": 0, "hours": "10:00-21:00", "area": "Chiyoda"},
    "Tokyo Disneyland": {"ticket": 620, "hours": "8:00-22:00", "area": "Urayasu"},
    "Meiji Jingu": {"ticket": 0, "hours": "5:00-18:00", "area": "Shibuya"},
    "teamLab Planets": {"ticket": 190, "hours": "9:00-22:00", "area": "Toyosu"},
    "Shibuya Sky": {"ticket": 120, "hours": "10:00-22:30", "area": "Shibuya"},
    "Tokyo National Museum": {"ticket": 50, "hours": "9:30-17:00", "area": "Ueno"},
    "Tsukiji Outer Market": {"ticket": 0, "hours": "5:00-14:00", "area": "Chuo"},
}

# Price per night in CNY. The first is what the search "recommends" — and it is over budget.
HOTELS: list[dict[str, Any]] = [
    {"hotel": "Tokyo Luxury Inn", "price_per_night": 4500, "recommended": True},
    {"hotel": "Asakusa View Hotel", "price_per_night": 1900},
    {"hotel": "Ueno Garden Hotel", "price_per_night": 1650},
    {"hotel": "Shinjuku Capsule Plus", "price_per_night": 600},
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bookings (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, kind TEXT NOT NULL, item TEXT NOT NULL,
    date TEXT NOT NULL, price INTEGER NOT NULL, client_ref TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS payments (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT NOT NULL, booking_id TEXT NOT NULL,
    amount INTEGER NOT NULL, client_ref TEXT NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class WorldSummary:
    """What happened in the world: bookings, duplicates, over-budget stays, payments."""

    bookings: int
    duplicates: int
    payments: int
    duplicate_payments: int
    rows: list[tuple[Any, ...]]


class World:
    """The external booking system (one SQLite file). ``after_commit`` is called right after a
    booking is durable and before the reply returns — the demo's crash window for "the side
    effect happened but the caller never heard"."""

    def __init__(self, path: Path, after_commit: Callable[[str], None] | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.executescript(_SCHEMA)
        self.after_commit = after_commit

    def close(self) -> None:
        self.conn.close()

    # -- read-only tools -------------------------------------------------------------------
    @staticmethod
    def search_attraction(name: str) -> dict[str, Any]:
        info = ATTRACTIONS.get(name, {"ticket": None, "hours": "unknown", "area": "unknown"})
        return {"name": name, **info}

    @staticmethod
    def search_hotel(city: str, night: str) -> dict[str, Any]:
        # The seed's second failure: the reply carries a field that names the budget and nulls it.
        return {"city": city, "night": night, "hotels": [dict(h) for h in HOTELS], "budget_per_night_cny": None}

    # -- side effects ----------------------------------------------------------------------
    def _insert(self, table: str, prefix: str, values: dict[str, Any]) -> str:
        self.conn.execute("BEGIN IMMEDIATE")
        n = self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        booking_id = f"{prefix}{n + 1:03d}"
        cols = ", ".join(["id", *values])
        marks = ", ".join("?" * (len(values) + 1))
        self.conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", (booking_id, *values.values()))
        self.conn.execute("COMMIT")
        if self.after_commit is not None:
            self.after_commit(f"{table}:committed")
        return booking_id

    def book_ticket(self, place: str, date: str, quantity: int, client_ref: str) -> dict[str, Any]:
        price = (ATTRACTIONS.get(place, {}).get("ticket") or 0) * quantity
        bid = self._insert("bookings", "TK", {"kind": "ticket", "item": place, "date": date, "price": price, "client_ref": client_ref})
        return {"booking_id": bid, "status": "confirmed", "place": place, "date": date, "total": price}

    def book_hotel(self, hotel: str, night: str, price_per_night: int, client_ref: str) -> dict[str, Any]:
        bid = self._insert("bookings", "HTL", {"kind": "hotel", "item": hotel, "date": night, "price": price_per_night, "client_ref": client_ref})
        return {"booking_id": bid, "status": "confirmed", "hotel": hotel, "night": night, "total": price_per_night}

    def pay(self, booking_id: str, amount: int, client_ref: str) -> dict[str, Any]:
        pid = self._insert("payments", "PAY", {"booking_id": booking_id, "amount": amount, "client_ref": client_ref})
        return {"payment_id": pid, "status": "paid", "booking_id": booking_id, "amount": amount}

    # -- reconciliation & audit ------------------------------------------------------------
    def find(self, client_ref: str) -> dict[str, Any] | None:
        """The reply a call with `client_ref` got, if it went through (for reconcile hooks)."""
        row = self.conn.execute(
            "SELECT id, kind, item, date, price FROM bookings WHERE client_ref = ? ORDER BY seq LIMIT 1", (client_ref,)
        ).fetchone()
        if row is not None:
            bid, kind, item, date, price = row
            if kind == "ticket":
                return {"booking_id": bid, "status": "confirmed", "place": item, "date": date, "total": price}
            return {"booking_id": bid, "status": "confirmed", "hotel": item, "night": date, "total": price}
        row = self.conn.execute(
            "SELECT id, booking_id, amount FROM payments WHERE client_ref = ? ORDER BY seq LIMIT 1", (client_ref,)
        ).fetchone()
        if row is not None:
            return {"payment_id": row[0], "status": "paid", "booking_id": row[1], "amount": row[2]}
        return None

    def summary(self) -> WorldSummary:
        rows = self.conn.execute("SELECT id, kind, item, date, price FROM bookings ORDER BY seq").fetchall()
        pays = self.conn.execute("SELECT id, booking_id, amount FROM payments ORDER BY seq").fetchall()
        distinct = {(k, i, d) for _, k, i, d, _ in rows if k == "ticket"} | {("hotel", d) for _, k, _, d, _ in rows if k == "hotel"}
        return WorldSummary(
            bookings=len(rows),
            duplicates=len(rows) - len(distinct),
            payments=len(pays),
            duplicate_payments=len(pays) - len({b for _, b, _ in pays}),
            rows=[tuple(r) for r in rows] + [("pay", *p) for p in pays],
        )

    def over_budget(self, budget_for_night: Callable[[str], int | None]) -> int:
        """Hotel bookings priced above the user's budget for that night."""
        rows = self.conn.execute("SELECT date, price FROM bookings WHERE kind = 'hotel'").fetchall()
        return sum(1 for night, price in rows if (b := budget_for_night(night)) is not None and price > b)
