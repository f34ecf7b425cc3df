"""The demo's deterministic plan: seed 004's Tokyo trip stretched over hundreds of steps.

Core work (search and book 8 attractions, search/book/pay 4 hotel nights), a user correction of
the hotel budget half-way, "review the itinerary" rounds that re-visit every booking (where the
seed's agent booked Senso-ji three times), and noise steps (weather, reviews, transit, currency)
whose long replies push earlier results out of any fixed window.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from mindpalace.demo.world import ATTRACTIONS

TRIP_DAYS = ("2025-05-20", "2025-05-21", "2025-05-22", "2025-05-23", "2025-05-24")
NIGHTS = TRIP_DAYS[:4]
BUDGET_PER_NIGHT_CNY = 2000
CORRECTED_BUDGET_CNY = 1800
CORRECTION_FROM_NIGHT = "2025-05-22"
TOTAL_BUDGET_CNY = 8000
NOISE_TOPICS = ("weather", "reviews", "transit", "currency", "news", "restaurants")
MIN_STEPS = 120


@dataclass(frozen=True, slots=True)
class StepSpec:
    """One planned step: ``kind`` (search_attraction, book_ticket, search_hotel, book_hotel, pay,
    feedback, noise) and its item (an attraction, a night, a noise topic)."""

    kind: str
    item: str
    date: str = ""

    @property
    def name(self) -> str:
        return " ".join(p for p in (self.kind, self.item, self.date) if p)


def attraction_dates() -> dict[str, str]:
    """Which day each attraction is visited (two per day, in listing order)."""
    return {name: TRIP_DAYS[i // 2] for i, name in enumerate(ATTRACTIONS)}


def budget_for_night(night: str) -> int:
    """The user's budget for `night` (CNY): the correction applies from CORRECTION_FROM_NIGHT on."""
    return CORRECTED_BUDGET_CNY if night >= CORRECTION_FROM_NIGHT else BUDGET_PER_NIGHT_CNY


def correction_text() -> str:
    return (
        f"Correction: from night {CORRECTION_FROM_NIGHT} on, keep hotels at or under "
        f"{CORRECTED_BUDGET_CNY} CNY per night."
    )


def build_plan(steps: int, seed: int) -> list[StepSpec]:
    """A plan of exactly `steps` steps (≥ MIN_STEPS), the same for the same (steps, seed)."""
    steps = max(steps, MIN_STEPS)
    rng = random.Random(seed)
    dates = attraction_dates()
    names = list(ATTRACTIONS)

    def visit(name: str) -> list[StepSpec]:
        return [StepSpec("search_attraction", name), StepSpec("book_ticket", name, dates[name])]

    def stay(night: str) -> list[StepSpec]:
        return [StepSpec("search_hotel", "Tokyo", night), StepSpec("book_hotel", "Tokyo", night), StepSpec("pay", "hotel", night)]

    core: list[StepSpec] = []
    for name in names[:4]:
        core += visit(name)
    for night in NIGHTS[:2]:
        core += stay(night)
    core.append(StepSpec("feedback", "budget"))
    for name in names[4:]:
        core += visit(name)
    for night in NIGHTS[2:]:
        core += stay(night)
    review: list[StepSpec] = []
    for _ in range(3):
        items = [StepSpec("book_ticket", n, dates[n]) for n in names]
        items += [StepSpec("book_hotel", "Tokyo", n) for n in NIGHTS] + [StepSpec("pay", "hotel", n) for n in NIGHTS]
        rng.shuffle(items)
        review += items
    noise_total = steps - len(core) - len(review)
    first = noise_total // 3
    plan = _interleave(core, _noise(first, rng), rng) + _interleave(review, _noise(noise_total - first, rng), rng)
    assert len(plan) == steps
    return plan


def _noise(n: int, rng: random.Random) -> list[StepSpec]:
    return [StepSpec("noise", rng.choice(NOISE_TOPICS), rng.choice(TRIP_DAYS)) for _ in range(n)]


def _interleave(work: list[StepSpec], noise: list[StepSpec], rng: random.Random) -> list[StepSpec]:
    """Merge keeping each list's order; positions of the noise steps are seeded."""
    flags = [True] * len(work) + [False] * len(noise)
    rng.shuffle(flags)
    w, n = iter(work), iter(noise)
    return [next(w) if f else next(n) for f in flags]


def noise_text(topic: str, date: str, index: int) -> str:
    """A long, deterministic distractor reply (~150 tokens) for a noise step."""
    rng = random.Random(f"{topic}:{date}:{index}")
    temps = rng.randint(14, 27)
    price = rng.choice((3800, 5200, 6100, 2900))
    lines = {
        "weather": f"Forecast for {date}: {temps}°C, humidity {rng.randint(40, 90)}%, wind {rng.randint(1, 9)} m/s.",
        "reviews": f"A guest wrote they paid {price} CNY per night at a Ginza hotel and loved the view.",
        "transit": f"Ginza line to Asakusa takes {rng.randint(8, 25)} minutes; a day pass costs 600 JPY.",
        "currency": f"1 CNY = {rng.uniform(19.5, 21.5):.2f} JPY today; card fees around 1.5%.",
        "news": f"Cherry blossom crowds expected on {date}; museums extend hours until {rng.randint(19, 21)}:00.",
        "restaurants": f"Top-rated sushi counter near Tsukiji: omakase at {rng.randint(300, 900)} CNY.",
    }
    filler = " ".join(
        rng.choice(("Visitors recommend arriving early.", "Queues are long on weekends.",
                    "Prices may change without notice.", "English menus are available.",
                    "Cash is still common in small shops.", "Trains are punctual and clean."))
        for _ in range(12)
    )
    return f"[{topic} {date}] {lines[topic]} {filler}"
