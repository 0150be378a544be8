"""``make faults``: the fault-injection suite's figures (tests marked ``faults``, several trials each) as a
table: per case, mode and measure, the median and the range over the trials. Reads the JSON lines the tests
recorded (tests/conftest.py ``fault_figures``), writes ``faults.md``."""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics


def tabulate(records: list[dict]) -> list[str]:
    values: dict[tuple[str, str, str], list] = collections.defaultdict(list)
    for record in records:
        for measure, value in record.items():
            if measure not in ("case", "mode", "test"):
                values[record["case"], record["mode"], measure].append(value)
    lines = ["| case | mode | measure | median | range | trials |", "|---|---|---|---|---|---|"]
    for (case, mode, measure), found in sorted(values.items()):
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in found):
            median, spread = f"{statistics.median(found):g}", f"{min(found):g}–{max(found):g}"
        else:  # booleans and words: how often each value came up
            median, spread = "", ", ".join(f"{v} ×{n}" for v, n in collections.Counter(map(str, found)).items())
        lines.append(f"| {case} | {mode} | {measure} | {median} | {spread} | {len(found)} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--figures", required=True, help="the JSON lines the fault tests recorded")
    parser.add_argument("--out", required=True, help="directory for faults.md")
    args = parser.parse_args()
    with open(args.figures) as f:
        records = [json.loads(line) for line in f if line.strip()]
    text = "\n".join(["# Fault-injection figures", "", *tabulate(records), ""])
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "faults.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
