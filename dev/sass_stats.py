#!/usr/bin/env python3
"""SASS statistics of an sm90a kernel: the output of `cuobjdump -sass` on a cubin that
`fa4jit gen --config C --arch sm_90a --cubin K.cubin` wrote (ctest dev.SassStatsFindsTheKvLoop).

  sass_stats.py A.sass            key instruction counts of the whole kernel and of its KV loop
  sass_stats.py A.sass B.sass     the same for both, then the KV loop's opcode differences

The KV loop is the smallest backward-branch region that holds both a QK (plain) and a PV
(transposed-B) HGMMA: the consumer mainloop of either schedule. Static counts of the whole kernel
include code a launch may never run (the paged producer copy, the split-KV epilogue); the KV loop is
what every tile of an unpaged, unsplit launch runs, so its opcode multiset is the regression check.
Exit status 1 when the second loop is longer than the first, or when they differ in any opcode outside
the integer moves/adds ptxas trades for one another on rescheduling (HGMMA, MUFU, FFMA, BAR, STL, ...).
"""
import collections
import re
import sys

KEY = ("HGMMA", "UTMALDG", "SYNCS", "BAR", "STG", "STS", "LDS", "LDG", "MUFU", "STL", "LDL", "USETMAXREG")
# Opcode families ptxas trades for one another when it reschedules integer work (moves and adds).
INTEGER_NOISE = ("IADD3", "IMAD", "MOV", "UMOV", "VIADD", "LEA", "LOP3", "ULOP3", "UIADD3", "ULEA", "USHF", "SHF",
                 "R2UR", "ISETP", "UISETP", "PLOP3", "SEL", "USEL", "PRMT", "NOP", "CS2R", "UIMAD")


def parse(path):
    ins = []
    for line in open(path):
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if not m:
            continue
        text = re.sub(r"^@!?U?P[T0-9]+\s+", "", m.group(2).strip())
        ins.append((int(m.group(1), 16), text.split()[0] if text else "", text))
    return ins


def kv_loop(ins):
    at = {a: i for i, (a, _, _) in enumerate(ins)}
    best = None
    for i, (a, op, text) in enumerate(ins):
        m = re.search(r"0x([0-9a-f]+)", text) if op.startswith("BRA") else None
        if not m or int(m.group(1), 16) >= a or int(m.group(1), 16) not in at:
            continue
        body = ins[at[int(m.group(1), 16)]:i + 1]
        hg = [t for _, o, t in body if o.startswith("HGMMA")]
        if any("tnspB" in t for t in hg) and any("tnspB" not in t for t in hg):
            if best is None or len(body) < len(best):
                best = body
    return best or []


def key_counts(ins):
    c = collections.Counter()
    for _, op, _ in ins:
        for k in KEY:
            if op.startswith(k):
                c[op] += 1
    return c


def main(paths):
    loops = []
    for p in paths:
        ins = parse(p)
        loop = kv_loop(ins)
        loops.append(collections.Counter(op for _, op, _ in loop))
        print(f"{p}: {len(ins)} instructions, KV loop {len(loop)}")
        print("  kernel:", " ".join(f"{k}={v}" for k, v in sorted(key_counts(ins).items())))
        print("  loop:  ", " ".join(f"{k}={v}" for k, v in sorted(key_counts(loop).items())))
    if len(loops) == 2:
        a, b = loops
        diff = [(o, a[o], b[o]) for o in sorted(set(a) | set(b)) if a[o] != b[o]]
        print("  loop diff:", " ".join(f"{o} {x}->{y}" for o, x, y in diff) or "none",
              f"(size {sum(a.values())} -> {sum(b.values())})")
        real = [o for o, _, _ in diff if not o.startswith(INTEGER_NOISE)]
        return 1 if real or sum(b.values()) > sum(a.values()) else 0
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
