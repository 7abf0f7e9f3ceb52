# Sums ncu --metrics gpu__time_duration.sum --csv output per kernel name (docs/GPU.md).
import csv, sys, collections, signal
signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
rows = list(csv.reader(open(sys.argv[1])))
hdr = None
tot = collections.defaultdict(float); cnt = collections.Counter()
for r in rows:
    if 'Kernel Name' in r and 'Metric Value' in r:
        hdr = r; continue
    if hdr is None or len(r) != len(hdr): continue
    d = dict(zip(hdr, r))
    if d.get('Metric Name') != 'gpu__time_duration.sum': continue
    v = float(d['Metric Value'].replace(',', ''))
    unit = d.get('Metric Unit', 'nsecond')
    scale = {'nsecond': 1e-6, 'usecond': 1e-3, 'msecond': 1.0}.get(unit, 1e-6)
    name = d['Kernel Name'].split('(')[0][:60]
    tot[name] += v * scale; cnt[name] += 1
all_ = sum(tot.values())
print(f"total kernel time {all_:.2f} ms over {sum(cnt.values())} launches")
for k, v in sorted(tot.items(), key=lambda x: -x[1])[:25]:
    print(f"{v:9.3f} ms {100*v/all_:5.1f}% {cnt[k]:5d}x  {k}")
