#!/usr/bin/env python3
"""Per-batch profile from waavd --log-level debug lines (GreedyBatchTimings), medians per
batch-size range, as in docs/benchmarks.md. Usage: batch_profile.py LOG [LOG...]"""
import re
import statistics
import sys

LINE = re.compile(
    r"batch of (\d+): encoder ([\d.]+) ms, prefill ([\d.]+) ms, (\d+) steps ([\d.]+) ms "
    r"\((\d+) row-steps(?:, (\d+) on the device)?\), sampling ([\d.]+) ms, decoder total ([\d.]+) ms")
RANGES = [(1, 4), (5, 12), (13, 24), (25, 40), (41, 64), (65, 96), (97, 128)]


def main(paths):
    rows = []
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.search(line)
                if m:
                    rows.append([float(g) if g is not None else float("nan") for g in m.groups()])
    print("rows n | encoder | prefill | steps | steps ms (per step) | device-only steps | "
          "sampling ms (per step) | decoder total   (medians, ms)")
    for lo, hi in RANGES:
        sel = [r for r in rows if lo <= r[0] <= hi]
        if not sel:
            continue
        med = lambda i: statistics.median(r[i] for r in sel)
        per = lambda i: statistics.median(r[i] / max(r[3], 1) for r in sel)
        dev = statistics.median(r[6] / max(r[3], 1) for r in sel)
        print(f"{lo}-{hi} {len(sel)} | {med(1):.1f} | {med(2):.1f} | {med(3):.0f} | "
              f"{med(4):.1f} ({per(4):.2f}) | {100 * dev:.0f}% | {med(7):.1f} ({per(7):.2f}) | "
              f"{med(8):.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
