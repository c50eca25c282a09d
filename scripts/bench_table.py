# bench_table.py: markdown tables from a convt3d bench JSON: one row per (problem, our mode) with
# cuDNN beside it and the roofline, the per-mode roofline geomeans, and the level-1 speed-ups.
import json, math, sys

b = json.load(open(sys.argv[1]))


def fmt(v, f):
    return "-" if v is None else f % v


def pct(v):
    return "-" if v is None else f"{100 * v:.1f}%" if v < 0.1 else f"{100 * v:.0f}%"


print("| problem | mode | bound | floor ms | ours ms | cuDNN ms | vs cuDNN | ours roofline "
      "| cuDNN roofline | vs cuDNN tf32 | rel_l2 | ours: kernel |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
level1 = {}  # mode -> speed-ups over cuDNN (fp32x3: over cuDNN tf32, PyTorch's default)
for p in b["problems"]:
    rows = {(r["impl"], r["mode"]): r for r in p["rows"]}
    for r in p["rows"]:
        if r["impl"] != "convt3d":
            continue
        m = r["mode"]
        c = rows.get(("cudnn", r.get("match_mode", m)))
        c_ms = c["ms"] if c and c.get("ok") else None
        ms = r["ms"] if r.get("ok") else None
        note = "" if r.get("ok") else " (failed)"
        print(f"| {p['name']} | {m} | {r.get('bound') or '-'} | {fmt(r.get('floor_ms'), '%.4f')} "
              f"| {fmt(ms, '%.3f')}{note} | {fmt(c_ms, '%.3f')} ({r.get('match_mode', '-')}) "
              f"| {fmt(r.get('speedup_vs_cudnn_match'), '%.2fx')} | {pct(r.get('roofline_frac'))} "
              f"| {pct(r.get('cudnn_roofline_frac'))} "
              f"| {fmt(r.get('speedup_vs_cudnn_tf32'), '%.2fx')} | {fmt(r.get('rel_l2'), '%.1e')} "
              f"| `{r.get('detail', '-').split(' ')[0]}` |")
        s = r.get("speedup_vs_cudnn_tf32") if m == "fp32x3" else r.get("speedup_vs_cudnn_match")
        if p["name"].startswith("L1-") and r.get("ok") and s:
            level1.setdefault(m, []).append(s)

geo = b.get("roofline", {}).get("geomeans", [])
if geo:
    limit = b["roofline"].get("geomean_min_floor_ms", 0.02) * 1000
    print(f"\nRoofline geomeans over problems with floor >= {limit:g} us "
          f"({b.get('ceilings_source', '')}; copy {fmt(b['protocol'].get('copy_gbps'), '%.0f')} GB/s):\n")
    print("| mode | problems | ours roofline | min | cuDNN mode | with cuDNN | cuDNN roofline "
          "| vs cuDNN | vs cuDNN tf32 |")
    print("|---|---|---|---|---|---|---|---|---|")
    for g in geo:
        print(f"| {g['mode']} | {g['problems']} | {pct(g['roofline_geomean'])} "
              f"| {pct(g['roofline_min'])} | {g['cudnn_mode']} | {g['cudnn_problems']} "
              f"| {pct(g['cudnn_roofline_geomean'])} "
              f"| {fmt(g['speedup_vs_cudnn_match_geomean'], '%.2fx')} "
              f"| {fmt(g['speedup_vs_cudnn_tf32_geomean'], '%.2fx')} |")
if level1:
    print()
for m, v in level1.items():
    vs = "cuDNN tf32" if m == "fp32x3" else "cuDNN " + m
    print(f"- level-1 {m} vs {vs}: geomean {math.exp(sum(map(math.log, v)) / len(v)):.2f}x, "
          f"min {min(v):.2f}x ({len(v)} problems)")
