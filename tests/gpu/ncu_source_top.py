#!/usr/bin/env python3
"""The hottest SASS instructions of an Nsight Compute source page, by warp stall samples.

Input: the CSV of `ncu --page source --csv --print-source sass` (one kernel); it starts with a
"Kernel Name" row, then the header row ("Address", "Source", ...). Prints the stall reasons'
shares over the whole kernel, then the COUNT instructions with the most samples and their two
largest reasons (tests/gpu/cluster_profile_device.sh).

Usage: ncu_source_top.py SOURCE.csv [COUNT]
"""
import csv
import sys


def number(cell: str) -> float:
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return 0.0


def main() -> int:
    path = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="", errors="replace") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    headers = [i for i, row in enumerate(rows) if row and row[0] == "Address"]
    if not headers:
        print("no source-page header row (Address, Source, ...) in", path)
        return 1
    header = rows[headers[0]]
    body = [row for row in rows[headers[0] + 1:] if len(row) == len(header)]
    if "Warp Stall Sampling (All Samples)" not in header:
        print("no stall-sampling column in", path)
        return 1
    samples = header.index("Warp Stall Sampling (All Samples)")
    reasons = [i for i, name in enumerate(header)
               if name.startswith("stall_") and "Not Issued" not in name]
    total = sum(number(row[samples]) for row in body) or 1.0
    print(f"{total:.0f} stall samples over {len(body)} instructions")
    shares = {header[i]: sum(number(row[i]) for row in body) for i in reasons}
    for name, value in sorted(shares.items(), key=lambda item: -item[1])[:10]:
        print(f"  {name:24s} {100 * value / total:5.1f}%")
    print(f"top {count} instructions:")
    for row in sorted(body, key=lambda row: -number(row[samples]))[:count]:
        top = sorted(((number(row[i]), header[i]) for i in reasons), reverse=True)[:2]
        why = ", ".join(f"{name} {value:.0f}" for value, name in top if value > 0)
        print(f"  {100 * number(row[samples]) / total:5.1f}%  {row[1].strip()[:60]:60s} {why}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
