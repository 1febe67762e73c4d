#!/usr/bin/env python3
"""Per-batch profile from waavd --log-level debug lines (GreedyBatchTimings), medians per
batch-size range, as in docs/benchmarks.md, then where the scheduler's time went in all: each
part summed over every batch, against the span from the first batch line to the last.
Usage: batch_profile.py LOG [LOG...]"""
import re
import statistics
import sys
from datetime import datetime

LINE = re.compile(
    r"batch of (\d+): encoder ([\d.]+) ms, prefill ([\d.]+) ms, (\d+) steps ([\d.]+) ms "
    r"\((\d+) row-steps(?:, (\d+) on the device)?(?:, \d+ ahead, \d+ unread)?\), sampling ([\d.]+) ms, decoder total ([\d.]+) ms"
    r"(?: \(finals aligned (\d+) in ([\d.]+) ms, results sent in ([\d.]+) ms\))?"
    r"(?:, windows prepared in ([\d.]+) ms)?"
    r"(?:, prompts of up to (\d+) tokens issued in ([\d.]+) ms)?"
    r"(?:; encoder passes (\d+): staging ([\d.]+) ms \(first ([\d.]+)\), uploads issued "
    r"([\d.]+) ms, replays issued ([\d.]+) ms, waiting ([\d.]+) ms)?"
    r"(?:; alignment: pass issued ([\d.]+) ms, waiting ([\d.]+) ms, host ([\d.]+) ms)?"
    r"(?:; sender thread ([\d.]+) ms)?"
    r"(?:; rows stopped at a restart (\d+), cut as repeats (\d+))?")
STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\]")
RANGES = [(1, 4), (5, 12), (13, 24), (25, 40), (41, 64), (65, 96), (97, 128)]


def main(paths):
    rows = []
    stamps = []
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                m = LINE.search(line)
                if m:
                    rows.append([float(g) if g is not None else float("nan") for g in m.groups()])
                    s = STAMP.search(line)
                    if s:
                        stamps.append(datetime.strptime(s.group(1), "%Y-%m-%d %H:%M:%S.%f"))
    print("rows n | encoder | prefill | steps | steps ms (per step) | device-only steps | "
          "sampling ms (per step) | decoder total   (medians, ms)"
          + (" | prompt tokens | prefill pass issued" if rows and rows[0][13] == rows[0][13] else ""))
    for lo, hi in RANGES:
        sel = [r for r in rows if lo <= r[0] <= hi]
        if not sel:
            continue
        med = lambda i: statistics.median(r[i] for r in sel)
        per = lambda i: statistics.median(r[i] / max(r[3], 1) for r in sel)
        dev = statistics.median(r[6] / max(r[3], 1) for r in sel)
        print(f"{lo}-{hi} {len(sel)} | {med(1):.1f} | {med(2):.1f} | {med(3):.0f} | "
              f"{med(4):.1f} ({per(4):.2f}) | {100 * dev:.0f}% | {med(7):.1f} ({per(7):.2f}) | "
              f"{med(8):.1f}" + (f" | {med(13):.0f} | {med(14):.1f}" if sel[0][13] == sel[0][13] else ""))
    if not rows:
        return
    total = lambda i: sum(r[i] for r in rows if r[i] == r[i])  # NaN (an older log) left out
    parts = {"encoder": total(1), "prefill": total(2), "steps": total(4), "sampling": total(7)}
    timed = rows[0][10] == rows[0][10]
    if timed:
        parts["alignment"] = total(10)
        parts["sending"] = total(11)
    parts["decoder, rest"] = total(8) - sum(v for k, v in parts.items() if k != "encoder")
    if rows[0][12] == rows[0][12]:
        parts["preparation"] = total(12)
    span = (stamps[-1] - stamps[0]).total_seconds() * 1000 if len(stamps) > 1 else float("nan")
    if span == 0:
        span = float("nan")  # one stamp repeated: no span to compare with
    summed = sum(parts.values())
    print(f"all {len(rows)} batches, {int(total(0))} rows, {span:.0f} ms from the first batch "
          f"line to the last; summed ms: " +
          ", ".join(f"{k} {v:.0f}" for k, v in parts.items()) +
          f"; in all {summed:.0f} ({100 * summed / span:.0f}% of the span)")
    if timed:
        print(f"finals aligned: {int(total(9))} in {int(sum(1 for r in rows if r[9] > 0))} batches")
    if rows[0][13] == rows[0][13]:
        fed = [r[13] for r in rows if r[13] > 0]
        print(f"prefill: {total(14):.0f} of its {total(2):.0f} ms issuing the batched passes; "
              f"prompts fed {statistics.median(fed) if fed else 0:.0f} tokens a row (median of "
              f"the batches' longest), up to {max(fed) if fed else 0:.0f}")
    if len(rows[0]) > 15 and rows[0][15] == rows[0][15]:
        print(f"encoder: {total(15):.0f} passes; of its {total(1):.0f} ms the scheduler's thread "
              f"spent {total(17):.0f} staging the first pass's windows, {total(16):.0f} staging "
              f"the next pass's while one ran, {total(18):.0f} issuing uploads, {total(19):.0f} "
              f"issuing replays, {total(20):.0f} waiting for the device")
    if len(rows[0]) > 21 and rows[0][21] == rows[0][21] and timed:
        print(f"alignment: of its {total(10):.0f} ms the scheduler's thread spent {total(21):.0f} "
              f"issuing the passes, {total(22):.0f} waiting for their scores, {total(23):.0f} on "
              f"the host halves (on the preparation threads)")
    if len(rows[0]) > 24 and rows[0][24] == rows[0][24] and timed:
        print(f"sending: the scheduler's thread {total(11):.0f} ms (posting results, sending the "
              f"aligned finals, waiting for the sender), the sender's thread {total(24):.0f} ms")
    if len(rows[0]) > 26 and rows[0][25] == rows[0][25]:
        print(f"rows stopped: {total(25):.0f} at a restart of their words, {total(26):.0f} cut as "
              f"repeats, of {int(total(0))}")


if __name__ == "__main__":
    main(sys.argv[1:])
