"""Summarises Nsight Compute CSV logs (gpu__time_duration.sum per kernel, and where the log has
them dram__bytes_read.sum and dram__bytes_write.sum, as GB/s) of tests/gpu/profile_device.sh: for each log, the kernels of one repetition (from the first kernel
named MARKER to the (N+1)-th, N = how many times the marker occurs per repetition), in order,
then the same kernels grouped by name, with the total.

Usage: profile_summary.py LOG MARKER N [LOG MARKER N ...]
"""

import csv
import sys
from collections import OrderedDict


def to_us(value, unit):
    if unit in ("ns", "nsecond"):
        return value / 1000.0
    if unit in ("us", "usecond"):
        return value
    return value * 1000.0  # ms


def to_bytes(value, unit):
    scale = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "KB": 1e3, "MB": 1e6, "GB": 1e9}
    return value * scale.get(unit, 1)


def kernels(path):
    """(name, grid, block, us, DRAM bytes or None) per kernel launch, in order."""
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]
    out = []
    by_id = OrderedDict()
    for row in csv.DictReader(lines):
        metric = row.get("Metric Name")
        value = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "")
        key = row.get("ID", str(len(by_id)))
        if key not in by_id:
            by_id[key] = [row["Kernel Name"], row.get("Grid Size", ""), row.get("Block Size", ""),
                          None, None]
        k = by_id[key]
        if metric == "gpu__time_duration.sum":
            k[3] = to_us(value, unit or "ns")
        elif metric in ("dram__bytes_read.sum", "dram__bytes_write.sum"):
            k[4] = (k[4] or 0.0) + to_bytes(value, unit)
    for k in by_id.values():
        if k[3] is not None:
            out.append(tuple(k))
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
    for name, grid, block, us, dram in rep:
        rate = f"  {dram / 1e6:8.1f} MB {dram / (us * 1e3):7.1f} GB/s" if dram is not None else ""
        print(f"   {us:9.2f} us  {name[:60]:60s} grid {grid} block {block}{rate}")
    groups = OrderedDict()
    for name, _, _, us, _ in rep:
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
