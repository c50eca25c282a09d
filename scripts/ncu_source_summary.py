# ncu_source_summary.py: instructions and stall samples by opcode and by hot code segment, from an ncu source-page CSV.
#   python3 scripts/ncu_source_summary.py src_TAG.csv   (scripts/device_ncu_source.sh writes it)
# A segment is a run of consecutive SASS instructions with the same executed count: a basic
# block, or straight-line code; ranked by its share of all executed instructions.
import collections
import csv
import signal
import sys

signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`


def opcode(source):
    words = source.split() or ["?"]
    op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return op.split(".")[0]


lines = open(sys.argv[1]).read().splitlines()
start = next(i for i, l in enumerate(lines) if l.startswith('"Address"'))
rows = list(csv.DictReader(lines[start:]))
count = lambda r: int(r["Instructions Executed"] or 0)
samples = lambda r: int(r["Warp Stall Sampling (All Samples)"] or 0)
total = sum(map(count, rows))
total_samples = sum(map(samples, rows)) or 1
print("instructions", len(rows), "executed", total)
ops, op_samples = collections.Counter(), collections.Counter()
for r in rows:
    ops[opcode(r["Source"])] += count(r)
    op_samples[opcode(r["Source"])] += samples(r)
for op, c in ops.most_common(25):
    print(f"{op:10s} {c / total * 100:5.1f}%  samples {op_samples[op] / total_samples * 100:5.1f}%")
segments = []
for r in rows:
    if segments and segments[-1][1] == count(r):
        segments[-1][2].append(r["Source"])
    else:
        segments.append([r["Address"], count(r), [r["Source"]]])
print("--- top segments (start, per-instruction count, instructions, share, opcodes)")
for addr, c, srcs in sorted(segments, key=lambda s: -s[1] * len(s[2]))[:25]:
    mix = collections.Counter(opcode(x) for x in srcs)
    print(addr, c, len(srcs), f"{c * len(srcs) / total * 100:.1f}%", dict(mix.most_common(6)))
