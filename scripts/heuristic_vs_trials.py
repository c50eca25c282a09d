# heuristic_vs_trials.py: never-tune picks (one "name mode kernel" line each, from a helper that
# calls gen::HeuristicPick) against a cache export's trial times: ratio to the tuned best.
#   python3 scripts/heuristic_vs_trials.py picks.txt candidates.txt cache_export.json
# candidates.txt: "name mode signature PICK kernel" lines (the list helper's output).
import json
import sys

picks, cands, export = sys.argv[1:4]
trials = {}
for e in json.load(open(export))["entries"]:
    ok = {t["candidate"]: t for t in e["trials"] if t["outcome"] == "ok"}
    trials[e["key"]["problem"]] = (ok, min(t["median_ms"] for t in ok.values()))
sigs = {}
for line in open(cands):
    f = line.split()
    if len(f) >= 4 and f[3] == "PICK":
        sigs[(f[0], f[1])] = f[2]
worst = 0
for line in open(picks):
    name, mode, pick = line.split()
    ok, best = trials.get(sigs.get((name, mode)), ({}, 0))
    if pick not in ok:
        print(f"{name:6} {mode:7} {pick:50} not timed")
        continue
    r = ok[pick]["median_ms"] / best
    worst = max(worst, r)
    print(f"{name:6} {mode:7} {pick:50} {ok[pick]['median_ms']:8.3f} ms, best {best:8.3f}: "
          f"{r:.2f}x ({ok[pick]['repeats']} runs)")
print(f"worst {worst:.2f}x")
