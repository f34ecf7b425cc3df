"""How many LoCoMo sentences the archived block would pin as rules the user stated.

LoCoMo is chit-chat between two friends: it states almost no rule addressed to an assistant, so
every sentence :func:`mindpalace.session.archived.rule_sentences` finds in it is, nearly always, a
false pin (a sentence shown under "rules the user stated" in every later prompt). The script counts
them per conversation (conv-26 and conv-30 are dev; the other eight held out) and can print the
dev conversations' pinned sentences to read (``--show``). Nothing is written; the data is read
from the shared folder.

    python benchmarks/rules_locomo.py                # counts
    python benchmarks/rules_locomo.py --show 40      # and up to 40 dev sentences pinned
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path


def default_data() -> Path:
    shared = os.environ.get("MINDPALACE_SHARED_DATA", str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    return Path(shared) / "locomo" / "locomo10.json"


def main(argv: Sequence[str] | None = None) -> int:
    from mindpalace.eval.locomo import DEV_CONVERSATIONS, load_locomo
    from mindpalace.session.archived import rule_sentences

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data())
    parser.add_argument("--show", type=int, default=0, help="print up to N pinned dev sentences")
    args = parser.parse_args(argv)
    shown: list[str] = []
    totals = {"dev": [0, 0], "held-out": [0, 0]}  # [turns, pinned sentences]
    print(f"{'conversation':<14}{'split':<10}{'turns':>7}{'pinned':>8}")
    for conv in load_locomo(args.data):
        split = "dev" if conv.sample_id in DEV_CONVERSATIONS else "held-out"
        pinned = [s for turn in conv.turns for s in rule_sentences(turn.text)]
        totals[split][0] += len(conv.turns)
        totals[split][1] += len(pinned)
        print(f"{conv.sample_id:<14}{split:<10}{len(conv.turns):>7}{len(pinned):>8}")
        if split == "dev":
            shown.extend(pinned[: max(0, args.show - len(shown))])
    for split, (turns, pinned) in totals.items():
        print(f"{'all ' + split:<24}{turns:>7}{pinned:>8}")
    for sentence in shown:
        print(f"  pinned: {sentence}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
