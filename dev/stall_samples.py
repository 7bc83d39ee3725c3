#!/usr/bin/env python3
"""Warp-stall samples per SASS instruction, summed by stall reason and by opcode, from Nsight
Compute's source page (`ncu --section SourceCounters --metrics group:smsp__pcsamp_warp_stall_reasons
--page source --csv --print-source sass`; `SOURCE=1 tools/gpu.sh profile prefill` writes one such
file per kernel). ctest dev.StallSamplesSumsBySourceLine.

  stall_samples.py A.csv[.gz]           samples by reason and by opcode
  stall_samples.py A.csv B.csv          both side by side (e.g. our kernel and FA4's), opcodes
                                        ordered by the difference of their samples

Used in docs/PERF.md run 42: a sampled stall sits on the instruction that waits, so "wait" samples on
an FMNMX chain mean the chain's own latency, not the instruction's cost.
"""
import collections
import csv
import gzip
import sys

ALL = "Warp Stall Sampling (All Samples)"


def load(path):
    """Rows of the per-instruction table (dicts keyed by ncu's column names)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        lines = [line for line in f if line.startswith('"')]  # ncu's own log lines are not quoted
    header, rows = None, []
    for row in csv.reader(lines):
        if row and row[0] == "Address":
            header = row
        elif header and len(row) >= len(header) - 1:
            rows.append(dict(zip(header, row)))
    if not header:
        sys.exit(f"{path}: no 'Address' header (not ncu --page source --csv output)")
    return header, rows


def number(text):
    try:
        return int(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0


def opcode(source):
    words = source.split()
    if words and words[0].startswith("@"):  # predicate
        words = words[1:]
    return words[0].split(".")[0] if words else ""


def summarize(path):
    header, rows = load(path)
    reasons = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
    by_reason, by_op, wait_by_op = collections.Counter(), collections.Counter(), collections.Counter()
    executed = 0
    for r in rows:
        for h in reasons:
            by_reason[h[len("stall_"):]] += number(r.get(h))
        op = opcode(r.get("Source", ""))
        by_op[op] += number(r.get(ALL))
        wait_by_op[op] += number(r.get("stall_wait"))
        executed += number(r.get("Instructions Executed"))
    return {"total": sum(by_op.values()), "executed": executed, "reasons": by_reason, "ops": by_op, "wait": wait_by_op}


def pct(n, total):
    return f"{100.0 * n / total:.1f}%" if total else "-"


def main(paths):
    if not 1 <= len(paths) <= 2:
        sys.exit(__doc__)
    s = [summarize(p) for p in paths]
    for p, x in zip(paths, s):
        print(f"{p}: {x['total']} samples, {x['executed']} warp instructions executed")
        print("  by reason: " + ", ".join(f"{k} {pct(v, x['total'])}" for k, v in x["reasons"].most_common(8)))
    if len(s) == 1:
        x = s[0]
        print("| opcode | samples | wait samples |")
        print("|---|---|---|")
        for op, n in x["ops"].most_common(16):
            print(f"| {op} | {n} ({pct(n, x['total'])}) | {x['wait'][op]} |")
        return
    a, b = s
    ops = set(a["ops"]) | set(b["ops"])
    print("| opcode | samples A | samples B | A - B | wait A | wait B |")
    print("|---|---|---|---|---|---|")
    for op in sorted(ops, key=lambda o: -abs(a["ops"][o] - b["ops"][o]))[:16]:
        print(f"| {op} | {a['ops'][op]} | {b['ops'][op]} | {a['ops'][op] - b['ops'][op]:+d} | {a['wait'][op]} | {b['wait'][op]} |")
    print(f"total A / B: {a['total'] / max(b['total'], 1):.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
