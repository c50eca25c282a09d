# ncu_source_summary.py: executed instructions and stall samples by opcode and by hot code segment, from an ncu source-page CSV.
import csv,sys,collections,re
f=sys.argv[1]
lines=open(f).read().splitlines()
start=[i for i,l in enumerate(lines) if l.startswith('"Address"')][0]
rows=list(csv.DictReader(lines[start:]))
tot=sum(int(r["Instructions Executed"] or 0) for r in rows)
print("instructions",len(rows),"executed",tot)
op=collections.Counter(); samp=collections.Counter()
for r in rows:
    o=r["Source"].split()[0] if r["Source"] else "?"
    if o.startswith("@"): o=r["Source"].split()[1]
    o=o.split(".")[0]
    op[o]+=int(r["Instructions Executed"] or 0)
    samp[o]+=int(r["Warp Stall Sampling (All Samples)"] or 0)
ts=sum(samp.values())
for o,c in op.most_common(25): print(f"{o:10s} {c/tot*100:5.1f}%  samples {samp[o]/ts*100:5.1f}%")
# regions: windows of consecutive instructions, executed count hotspots
if len(sys.argv)>2:
  W=int(sys.argv[2])
  for i,r in enumerate(rows):
    c=int(r["Instructions Executed"] or 0)
    if c>=W: print(r["Address"],c,r["Warp Stall Sampling (All Samples)"],r["Source"][:90])
# contiguous runs with equal-ish execution counts: print segments with share
seg=[];cur=None
for r in rows:
    c=int(r["Instructions Executed"] or 0)
    if cur and cur[1]==c: cur[2]+=1; cur[3].append(r["Source"])
    else:
        cur=[r["Address"],c,1,[r["Source"]]]; seg.append(cur)
seg2=sorted(seg,key=lambda s:-s[1]*s[2])
print("--- top segments (start, per-instr count, n instrs, share)")
for s in seg2[:25]:
    ops=collections.Counter(x.split()[0] if not x.startswith('@') else x.split()[1] for x in s[3])
    print(s[0],s[1],s[2],f"{s[1]*s[2]/tot*100:.1f}%",dict(ops.most_common(6)))
