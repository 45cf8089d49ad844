"""bench/http/summary.py RESULTS DESCRIBE ROUNDS SECS WARMUP POOL: bench/http.sh's summary.md from runs.csv."""
import csv
import statistics as st
import sys

res, desc, rounds, secs, warm, pool = sys.argv[1:]
rows = list(csv.DictReader(open(f"{res}/runs.csv")))
med = st.median


def f(x, fmt):
    return format(x, fmt) if x is not None else "-"


def get(stack, wl, cl, ct):
    return [r for r in rows if (r["stack"], r["workload"], r["clients"], r["contender"]) == (stack, wl, cl, ct)]


print(f"# Idempotency-Key middleware over HTTP ({desc})\n")
print(f"bench/http.sh: {rounds} rounds, {warm} s warm-up + {secs} s measured per run, contenders alternating;")
print(f"a pool of {pool} connections per server; medians of the rounds. Load (uptime):\n")
for line in open(f"{res}/load.txt"):
    print(f"    {line.rstrip()}")
bad = [r for r in rows if int(r["non2xx"]) or int(r["errors"]) or r["created"] != r["orders"]]
print()
if bad:
    print(f"**{len(bad)} runs with non-2xx answers, errors, or orders not equal to the 201s:**\n")
    for r in bad:
        print(f"    {r}")
else:
    print("Every answer 2xx, and after every run the orders in the table were exactly the 201s the generator got\n"
          "(new keys: one order each; retries: none).")
stacks = list(dict.fromkeys(r["stack"] for r in rows))
for wl in dict.fromkeys(r["workload"] for r in rows):
    title = ("every request a new key" if wl == "new" else
             "retries only (keys completed before the measurement): the replay path")
    print(f"\n## Workload `{wl}`: {title}\n")
    print("| stack | clients | contender | requests/s | p50 ms | p99 ms | rps range | p99 range | app CPU µs/req | PostgreSQL CPU µs/req | machine busy % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    ratios = []
    for stack in stacks:
        for cl in dict.fromkeys(r["clients"] for r in rows):
            cts = [c for c in ("bare", "eo", "hand") if get(stack, wl, cl, c)]
            m = {}
            for ct in cts:
                g = get(stack, wl, cl, ct)
                rps = [float(r["rps"]) for r in g]
                p50 = [float(r["p50_ms"]) for r in g]
                p99 = [float(r["p99_ms"]) for r in g]
                m[ct] = (med(rps), med(p50), med(p99))
                print(f"| {stack} | {cl} | {ct} | {med(rps):,.0f} | {med(p50):.2f} | {med(p99):.2f} | "
                      f"{min(rps):,.0f}–{max(rps):,.0f} | {min(p99):.2f}–{max(p99):.2f} | "
                      f"{med(float(r['app_us_per_req']) for r in g):.0f} | "
                      f"{med(float(r['pg_us_per_req']) for r in g):.0f} | "
                      f"{med(float(r['machine_busy_pct']) for r in g):.0f} |")
            for other in ("hand", "bare"):
                if "eo" not in m or other not in m:
                    continue
                per = {}
                for r in get(stack, wl, cl, "eo"):
                    o = [x for x in get(stack, wl, cl, other) if x["round"] == r["round"]]
                    if o:
                        per[r["round"]] = (float(r["rps"]) / float(o[0]["rps"]),
                                           float(r["p99_ms"]) / float(o[0]["p99_ms"]))
                rr = [v[0] for v in per.values()]
                pr = [v[1] for v in per.values()]
                ratios.append((stack, cl, other, med(rr), min(rr), max(rr), m["eo"][0] / m[other][0],
                               med(pr), min(pr), max(pr), m["eo"][2] / m[other][2]))
    print("\nRatios eo/other: requests/s (higher is better for eo) and p99 (lower is better), the median of")
    print("the per-round ratios with their range, and the ratio of the medians:\n")
    print("| stack | clients | eo / | requests/s, per round (range) | of the medians | p99, per round (range) | of the medians |")
    print("|---|---|---|---|---|---|---|")
    for s, cl, o, rm, rlo, rhi, rmed, pm, plo, phi, pmed in ratios:
        print(f"| {s} | {cl} | {o} | {rm:.2f}x ({rlo:.2f}–{rhi:.2f}) | {rmed:.2f}x | {pm:.2f}x ({plo:.2f}–{phi:.2f}) | {pmed:.2f}x |")
