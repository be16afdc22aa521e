#!/usr/bin/python3
"""Per-kernel-name summary of an Nsight Compute CSV (`ncu --csv --metrics gpu__time_duration.sum,dram__bytes_read.sum,
dram__bytes_write.sum ...`): launches, summed GPU time, time per launch and DRAM bytes, sorted by time.
Usage: bench/analysis/ncu_summary.py ncu.csv   (lines that are not CSV rows, e.g. the program's own output, are skipped)"""
import collections
import csv
import sys

UNIT = {"byte": 1, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9, "ns": 1e-3, "nsecond": 1e-3, "us": 1, "usecond": 1,
        "ms": 1e3, "msecond": 1e3}


def main(path):
    rows = [r for r in csv.reader(line for line in open(path) if line.startswith('"'))]
    if not rows:
        sys.exit(f"{path}: no ncu CSV rows")
    h = rows[0]
    ki, mi, vi, ui, ii = (h.index(x) for x in ("Kernel Name", "Metric Name", "Metric Value", "Metric Unit", "ID"))
    per = collections.OrderedDict()
    for r in rows[1:]:
        e = per.setdefault(r[ii], {"k": r[ki].split("(")[0][:70]})
        e[r[mi]] = float(r[vi].replace(",", "")) * UNIT.get(r[ui], 1)
    agg = collections.OrderedDict()
    for e in per.values():
        a = agg.setdefault(e["k"], [0, 0.0, 0.0])
        a[0] += 1
        a[1] += e.get("gpu__time_duration.sum", 0)
        a[2] += e.get("dram__bytes_read.sum", 0) + e.get("dram__bytes_write.sum", 0)
    tt = sum(a[1] for a in agg.values())
    tb = sum(a[2] for a in agg.values())
    print("kernels %d, sum of kernel durations %.1f us, DRAM bytes %.1f MB" % (len(per), tt, tb / 1e6))
    for k, a in sorted(agg.items(), key=lambda x: -x[1][1]):
        print("%5d  %9.1f us  %7.2f us/launch  %8.2f MB  %s" % (a[0], a[1], a[1] / a[0], a[2] / 1e6, k))


if __name__ == "__main__":
    main(sys.argv[1])
