"""Summarises Nsight Compute CSV logs (gpu__time_duration.sum per kernel) of
tests/gpu/profile_device.sh: for each log, the kernels of one repetition (from the first kernel
named MARKER to the (N+1)-th, N = how many times the marker occurs per repetition), in order,
then the same kernels grouped by name, with the total.

Usage: profile_summary.py LOG MARKER N [LOG MARKER N ...]
"""

import csv
import sys
from collections import OrderedDict


def kernels(path):
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]
    rows = list(csv.DictReader(lines))
    out = []
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        us = value / 1000.0 if unit in ("ns", "nsecond") else value if unit in ("us", "usecond") else value * 1000.0
        out.append((row["Kernel Name"], row.get("Grid Size", ""), row.get("Block Size", ""), us))
    return out


def summarise(path, marker, per_rep):
    ks = kernels(path)
    starts = [i for i, k in enumerate(ks) if marker in k[0]]
    print(f"== {path}: {len(ks)} kernels profiled, marker {marker} at {starts[:8]}")
    if len(starts) < per_rep + 1:
        print("   not enough repetitions profiled")
        return
    rep = ks[starts[0]:starts[per_rep]]
    total = sum(k[3] for k in rep)
    print(f"   one repetition: {len(rep)} kernels, {total:.1f} us summed")
    for name, grid, block, us in rep:
        print(f"   {us:9.2f} us  {name[:60]:60s} grid {grid} block {block}")
    groups = OrderedDict()
    for name, _, _, us in rep:
        n, t = groups.get(name, (0, 0.0))
        groups[name] = (n + 1, t + us)
    print("   by kernel:")
    for name, (n, t) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
        print(f"   {t:9.2f} us  {n:3d} x  {name[:70]}")


def main(argv):
    if len(argv) < 4 or (len(argv) - 1) % 3 != 0:
        print(__doc__)
        return 2
    for i in range(1, len(argv), 3):
        try:
            summarise(argv[i], argv[i + 1], int(argv[i + 2]))
        except (OSError, ValueError, KeyError) as e:
            print(f"== {argv[i]}: cannot summarise: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
