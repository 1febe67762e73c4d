#!/usr/bin/env python3
"""Top SASS lines of an Nsight Compute source page (ncu --page source --csv --print-source sass),
by warp stall samples: the profile's hottest instructions, for tests/gpu/cluster_profile_device.sh.

Usage: ncu_source_top.py SOURCE.csv [COUNT]
"""
import csv
import sys


def main() -> int:
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="", errors="replace") as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.reader(lines))
    if not rows:
        print("no CSV rows in", path)
        return 1
    header = rows[0]
    print("columns:", " | ".join(header))
    samples = [i for i, name in enumerate(header) if "Sampling" in name and "All" in name]
    if not samples:
        samples = [i for i, name in enumerate(header) if "Sampling" in name]
    if not samples:
        print("no stall-sampling column")
        return 1
    key = samples[0]

    def value(row):
        try:
            return float(row[key].replace(",", ""))
        except (ValueError, IndexError):
            return 0.0

    body = [r for r in rows[1:] if len(r) == len(header)]
    total = sum(value(r) for r in body) or 1.0
    print(f"{header[key]}: {total:.0f} samples over {len(body)} lines")
    for row in sorted(body, key=value, reverse=True)[:count]:
        share = 100.0 * value(row) / total
        print(f"{share:5.1f}%  " + " | ".join(cell[:90] for cell in row[: min(len(row), 3)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
