"""``python -m benchmarks.csv_recovery [FILES] [SEED]``: how often CSV recovery guesses wrong.

Random files of 1-6 fully quoted rows over a small alphabet (letters, space, comma, newline and
quote: fields that span lines and hold quotes), with 1-3 bad rows of the kinds the shard step
must survive inserted anywhere. Counts the files where a good row was lost or changed, and where
the number of bad rows reported differs from the number inserted. The tests pin the cases found;
this measures the rest.
"""

from __future__ import annotations

import os
import random
import sys
import tempfile

from tfrecord_suite.shard import sources

BAD_ROWS = (
    '"unterminated,1,2\n',
    '"x"y,1,2\n',
    '1,"two"three,4\n',
    "short,row\n",
    "one,too,many,columns\n",
)


def measure(files: int, seed: int = 1) -> dict[str, int]:
    """Read ``files`` random files; count those that lost a good row or miscounted bad ones."""
    rng = random.Random(seed)

    def cell() -> str:
        return "".join(rng.choice('ab ,\n"') for _ in range(rng.randint(0, 5)))

    def quoted(text: str) -> str:
        return '"' + text.replace('"', '""') + '"'

    path = os.path.join(tempfile.mkdtemp(), "f.csv")
    lost = miscounted = 0
    for _ in range(files):
        good = [(cell(), cell(), cell()) for _ in range(rng.randint(1, 6))]
        bad = [(rng.randint(0, 6), rng.choice(BAD_ROWS)) for _ in range(rng.randint(1, 3))]
        lines = [",".join(quoted(c) for c in row) + "\n" for row in good]
        for position, text in sorted(bad, reverse=True):
            lines.insert(min(position, len(lines)), text)
        with open(path, "w") as fh:
            fh.write("a,b,c\n" + "".join(lines))
        rows = list(sources.read_rows(path, sources.ReadOptions(format="csv")))
        kept = [(r.values["a"], r.values["b"], r.values["c"]) for r in rows if not r.error]
        lost += kept != good
        miscounted += sum(1 for r in rows if r.error) != len(bad)
    return {"files": files, "lost_or_changed_a_good_row": lost, "miscounted_bad_rows": miscounted}


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:3]]
    print(measure(*(args or [20_000])))
