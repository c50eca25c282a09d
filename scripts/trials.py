# trials.py: every tuning trial of a `convt3d cache export` file, one line each, by problem.
import json
import sys

for e in json.load(open(sys.argv[1]))["entries"]:
    key = e["key"]
    sig = key.get("problem", key) if isinstance(key, dict) else key
    print("==", sig, "winner", e["winner"].get("candidate", e["winner"]))
    for t in sorted(e["trials"], key=lambda t: t.get("median_ms") or 1e9):
        print(f"  {t['candidate']:<48} {t.get('median_ms') or 0:9.4f} ms  err {t.get('rel_err') or 0:.1e}  {t['outcome']}")
