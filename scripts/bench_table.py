# bench_table.py: the markdown table (ours vs cuDNN per mode) and level-1 geomeans from a convt3d bench JSON.
import json, math, sys
b = json.load(open(sys.argv[1]))
rows = []
ratios = {m: [] for m in ("fp32", "fp32x3", "tf32", "bf16")}
print("| problem | ours fp32 | cuDNN fp32 | ours fp32x3 (err) | ours tf32 (err) | cuDNN tf32 | ours bf16 (err) | cuDNN bf16 | fp32 | fp32x3 vs cuDNN tf32 | tf32 | bf16 |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for p in b["problems"]:
    r = {(x["impl"], x["mode"]): x for x in p["rows"] if x.get("ok")}
    o = lambda m: r[("convt3d", m)]
    c = lambda m: r[("cudnn", m)]
    s = {m: c("fp32" if m == "fp32" else "tf32" if m in ("fp32x3", "tf32") else "bf16")["ms"] / o(m)["ms"] for m in ratios}
    if p["name"].startswith("L1-"):
        for m in ratios: ratios[m].append(s[m])
    print(f"| {p['name']} | {o('fp32')['ms']:.3f} | {c('fp32')['ms']:.3f} | {o('fp32x3')['ms']:.3f} ({o('fp32x3')['rel_l2']:.1e}) | {o('tf32')['ms']:.3f} ({o('tf32')['rel_l2']:.1e}) | {c('tf32')['ms']:.3f} | {o('bf16')['ms']:.3f} ({o('bf16')['rel_l2']:.1e}) | {c('bf16')['ms']:.3f} | {s['fp32']:.2f}x | {s['fp32x3']:.2f}x | {s['tf32']:.2f}x | {s['bf16']:.2f}x |")
for m, v in ratios.items():
    print(f"- {m}: geomean {math.exp(sum(map(math.log, v)) / len(v)):.2f}x, min {min(v):.2f}x")
