# ncu_csv.py: per-group metric sums of an `ncu --csv --metrics ...` dump (one row per launch and
# metric), for the device scripts' tables: group by kernel name, or by kind (main, prep, prepx,
# post, fill).
import collections
import csv


def kind_of(kernel):
    """A candidate's kernel kind from its symbol: its suffix, or main."""
    return kernel.rsplit("_", 1)[-1] if kernel.endswith(("_prep", "_prepx", "_post", "_fill", "_amax", "_wamax")) else "main"


def sums_by(path, group):
    """{group(kernel name): {metric: sum over launches, "n": launches}} in first-seen order, or
    None where the dump has no metric rows."""
    rows = [r for r in csv.reader(open(path)) if len(r) > 10]
    if not rows:
        return None
    h = rows[0]
    ki, mi, vi, ii = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value"), h.index("ID")
    launches = collections.OrderedDict()
    for r in rows[1:]:
        launches.setdefault((r[ii], r[ki]), {})[r[mi]] = r[vi].replace(",", "")
    sums = collections.OrderedDict()
    for (_, kernel), metrics in launches.items():
        s = sums.setdefault(group(kernel), collections.defaultdict(float))
        s["n"] += 1
        for key, value in metrics.items():
            try:
                s[key] += float(value)
            except ValueError:
                pass
    return sums
