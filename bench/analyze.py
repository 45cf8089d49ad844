#!/usr/bin/env python3
"""bench/analyze.py -- numbers for bench/run.sh.

  analyze.py row CSV LOG_PREFIX PGBENCH_OUT key=value ...
      Append one run to CSV (header written if the file is new): tps and the
      transaction count from pgbench's output, p50/p99/mean latency from the
      per-transaction logs (LOG_PREFIX.*), and the per-message figures
      derived from the server counters passed as key=value.

  analyze.py summary CSV OUTDIR META
      Medians per contender, the medians of pairwise ratios (each ratio taken
      within one round, same clients and duplicate share), the targets of
      issue 5 marked met/missed, medians.csv, summary.md and chart.png
      (gnuplot).  META is a file of key=value lines describing the run.
"""
import csv
import glob
import math
import os
import re
import statistics
import subprocess
import sys

FIELDS = [
    "round", "pos", "contender", "clients", "dup_pct", "duration_s", "status",
    "txns", "tps", "lat_mean_ms", "lat_p50_ms", "lat_p99_ms",
    "wal_bytes", "wal_bytes_per_msg", "wal_fpi", "key_table", "key_rows",
    "changes", "dup_share", "key_dead_versions", "key_dead_per_msg", "key_dead_per_key",
    "all_dead_versions", "all_dead_per_msg", "n_dead_tup_after", "key_seq_scans",
]

DESCRIPTIONS = {
    "floor": "floor: the business change alone (no dedup)",
    "hand": "hand-written: INSERT PROCESSING, change, UPDATE DONE+result",
    "hand_min": "minimal hand-written: INSERT key, change",
    "hand_outbox": "hand-written + outbox row (indexed table)",
    "hand_pgq": "hand-written + pgq.insert_event",
    "one_write": "one-write limit: INSERT DONE+result, change, SELECT 1",
    "eo": "eo: eo_claim, change, eo_complete(result)",
    "eo_noresult": "eo: eo_claim, change (commit marks done)",
    "eo_emit": "eo: eo_claim, change, eo_emit, eo_complete",
    "eo_lease": "eo lease mode: claim txn, then change + complete(token)",
    "hand_lease": "hand-written 2 txns: PROCESSING+lease, then change + DONE",
}
ORDER = list(DESCRIPTIONS)

# (label, numerator, denominator, dup share, metric, op, threshold)
# metric "tps": ratio of tps (higher is better); the others are ratios of
# per-message costs or latencies (lower is better).
TARGETS = [
    ("eo vs one-write limit, tps", "eo", "one_write", "base", "tps", ">=", 0.95),
    ("eo vs hand-written, tps", "eo", "hand", "base", "tps", ">=", 1.10),
    ("eo vs hand-written, p99 latency", "eo", "hand", "base", "lat_p99_ms", "<=", 1.00),
    ("eo vs hand-written, tps, redelivery storm", "eo", "hand", "storm", "tps", ">=", 1.20),
    ("eo without result vs minimal hand-written, tps", "eo_noresult", "hand_min", "base", "tps", ">=", 0.95),
    ("eo + emit vs hand-written outbox, tps", "eo_emit", "hand_outbox", "base", "tps", ">=", 1.10),
    ("eo + emit vs PgQ, tps", "eo_emit", "hand_pgq", "base", "tps", ">=", 1.20),
    ("eo lease mode vs hand-written two-transaction, tps", "eo_lease", "hand_lease", "base", "tps", ">=", 1.00),
    ("eo vs hand-written, WAL bytes per message", "eo", "hand", "base", "wal_bytes_per_msg", "<", 1.00),
    ("eo vs hand-written, dead key-row versions per processed message", "eo", "hand", "base", "key_dead_per_key", "<", 1.00),
]


def pct(sorted_vals, p):
    """Percentile by the nearest-rank method."""
    if not sorted_vals:
        return float("nan")
    rank = max(1, math.ceil(p / 100.0 * len(sorted_vals)))
    return sorted_vals[rank - 1]


def fnum(x, digits=1):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{x:,.{digits}f}"


def cmd_row(csv_path, log_prefix, pgbench_out, pairs):
    kv = dict(p.split("=", 1) for p in pairs)
    out = open(pgbench_out, encoding="utf-8", errors="replace").read()
    m = re.search(r"number of transactions actually processed: (\d+)", out)
    txns = int(m.group(1)) if m else 0
    m = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", out, re.M)
    tps = float(m.group(1)) if m else float("nan")
    lat = []
    for path in glob.glob(log_prefix + ".[0-9]*"):
        with open(path) as f:
            for line in f:
                parts = line.split()
                # client_id transaction_no time_us script_no epoch epoch_us
                if len(parts) >= 3 and parts[2].isdigit():
                    lat.append(int(parts[2]))
    lat.sort()
    row = {k: kv.get(k, "") for k in FIELDS}
    row.update(txns=txns, tps=f"{tps:.1f}")
    if lat:
        row.update(lat_mean_ms=f"{statistics.fmean(lat) / 1000:.3f}",
                   lat_p50_ms=f"{pct(lat, 50) / 1000:.3f}",
                   lat_p99_ms=f"{pct(lat, 99) / 1000:.3f}")
    if txns:
        wal = int(kv.get("wal_bytes") or 0)
        row["wal_bytes_per_msg"] = f"{wal / txns:.1f}"
        for k in ("key_dead", "all_dead"):
            v = kv.get(k + "_versions", "")
            if v != "":
                row[k + "_per_msg"] = f"{int(v) / txns:.3f}"
        if kv.get("key_rows", "") != "":
            row["dup_share"] = f"{1 - int(kv['key_rows']) / txns:.4f}"
            if int(kv["key_rows"]) and kv.get("key_dead_versions", "") != "":
                row["key_dead_per_key"] = f"{int(kv['key_dead_versions']) / int(kv['key_rows']):.3f}"
    if row["status"] == "ok" and (txns == 0 or len(lat) != txns):
        row["status"] = f"suspect(log {len(lat)} != {txns} txns)"
    new = not os.path.exists(csv_path)
    with open(csv_path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        if new:
            w.writeheader()
        w.writerow(row)
    return row


def load(csv_path):
    with open(csv_path, newline="") as f:
        return [r for r in csv.DictReader(f)]


def fl(r, k):
    try:
        return float(r[k])
    except (KeyError, ValueError, TypeError):
        return float("nan")


def median(vals):
    vals = [v for v in vals if not math.isnan(v)]
    return statistics.median(vals) if vals else float("nan")


def cmd_summary(csv_path, outdir, meta_path):
    meta = {}
    with open(meta_path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                meta[k] = v
    rows = load(csv_path)
    ok = [r for r in rows if r["status"] == "ok"]
    bad = [r for r in rows if r["status"] != "ok"]
    base, storm = meta.get("dup_pct", "10"), meta.get("storm_pct", "50")
    dupkey = {"base": base, "storm": storm}

    groups = {}
    for r in ok:
        groups.setdefault((r["contender"], int(r["clients"]), r["dup_pct"]), []).append(r)
    clients = sorted({int(r["clients"]) for r in rows})

    def order(key):
        c, n, d = key
        return (d != base, n, ORDER.index(c) if c in ORDER else 99)

    med = {}
    metrics = ["tps", "lat_p50_ms", "lat_p99_ms", "wal_bytes_per_msg", "wal_fpi",
               "key_dead_per_msg", "key_dead_per_key", "all_dead_per_msg", "dup_share"]
    with open(os.path.join(outdir, "medians.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["contender", "clients", "dup_pct", "runs"] + metrics)
        for key in sorted(groups, key=order):
            rs = groups[key]
            med[key] = {m: median([fl(r, m) for r in rs]) for m in metrics}
            med[key]["runs"] = len(rs)
            w.writerow(list(key) + [len(rs)] + [f"{med[key][m]:.4f}" for m in metrics])

    def ratios(num, den, dup, metric, n):
        """Per-round ratios num/den, same clients and duplicate share."""
        by_round = {}
        for r in ok:
            if int(r["clients"]) == n and r["dup_pct"] == dup and r["contender"] in (num, den):
                by_round.setdefault(r["round"], {})[r["contender"]] = fl(r, metric)
        out = []
        for d in by_round.values():
            if num in d and den in d and d[den] and not math.isnan(d[num] / d[den]):
                out.append(d[num] / d[den])
        return out

    L = []
    L.append("# eo benchmark results\n")
    L.append(f"Run {meta.get('started', '?')}: {meta.get('rounds')} rounds x "
             f"{meta.get('duration')} s per run, clients {meta.get('clients')}, "
             f"{base}% duplicate deliveries ({storm}% in the storm runs), "
             f"pgbench `-M prepared -n`, `synchronous_commit = on`, fsync on.")
    L.append(f"Machine: {meta.get('cpu', '?')}, {meta.get('ncpu', '?')} cores; "
             f"load average at start {meta.get('loadavg', '?')}. "
             f"{meta.get('postgres', '')}; eo {meta.get('eo_version', '?')}.")
    if meta.get("note"):
        L.append(f"\n**{meta['note']}**")
    L.append("\nMedians over rounds. tps is deliveries (messages, duplicates included) "
             "per second; latency is per delivery (both transactions in lease mode). "
             "WAL is bytes per delivery over the whole server. Dead versions are the "
             "key table's updated or deleted row versions (n_tup_upd + n_tup_del) per "
             "processed message, i.e. per key stored.\n")
    L.append("| contender | clients | dup % | tps | p50 ms | p99 ms | WAL B/msg | "
             "key-table dead/key | measured dup share | runs |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for key in sorted(med, key=order):
        c, n, d = key
        m = med[key]
        L.append(f"| {c} | {n} | {d} | {fnum(m['tps'])} | {fnum(m['lat_p50_ms'], 3)} | "
                 f"{fnum(m['lat_p99_ms'], 3)} | {fnum(m['wal_bytes_per_msg'], 0)} | "
                 f"{fnum(m['key_dead_per_key'], 3)} | {fnum(m['dup_share'], 3)} | {m['runs']} |")
    L.append("\nContenders:\n")
    for c in ORDER:
        if any(k[0] == c for k in med):
            L.append(f"- `{c}`: {DESCRIPTIONS[c]}")

    L.append("\n## Targets (issue 5)\n")
    L.append("Median of the per-round ratios (min-max over rounds in brackets).\n")
    L.append("| target | clients | median ratio | range | goal | verdict |")
    L.append("|---|---:|---:|---|---|---|")
    verdicts = {"met": 0, "missed": 0, "not measured": 0}
    for label, num, den, dk, metric, op, thr in TARGETS:
        for n in clients:
            rs = ratios(num, den, dupkey[dk], metric, n)
            if not rs:
                v = "not measured"
                L.append(f"| {label} | {n} | n/a | | {op} {thr:.2f}x | not measured |")
            else:
                m = statistics.median(rs)
                good = {">=": m >= thr, "<=": m <= thr, "<": m < thr}[op]
                v = "met" if good else "missed"
                L.append(f"| {label} | {n} | {m:.3f}x | {min(rs):.3f}-{max(rs):.3f} | "
                         f"{op} {thr:.2f}x | **{v}** |")
            verdicts[v] += 1
    L.append(f"\n{verdicts['met']} met, {verdicts['missed']} missed, "
             f"{verdicts['not measured']} not measured.")

    L.append("\n## Not measured yet\n")
    for line in meta.get("todo", "").split("|"):
        if line.strip():
            L.append(f"- {line.strip()}")
    if bad:
        L.append("\n## Runs that failed\n")
        for r in bad:
            L.append(f"- round {r['round']} {r['contender']} c={r['clients']} "
                     f"dup={r['dup_pct']}: {r['status']}")
    L.append("\nRaw figures: `runs.csv` (one line per run), `medians.csv`; chart: `chart.png`.")
    L.append("\n![tps and p99 latency per contender](chart.png)")
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    chart(outdir, med, base, storm, clients)
    return bad


def chart(outdir, med, base, storm, clients):
    names = []
    for d, suffix in ((base, ""), (storm, f" {storm}% dup")):
        for c in ORDER:
            if any((c, n, d) in med for n in clients):
                names.append((c, d, c + suffix))
    dat = os.path.join(outdir, "chart.dat")
    with open(dat, "w") as f:
        f.write("# name " + " ".join(f"tps_c{n} p99_c{n}" for n in clients) + "\n")
        for c, d, label in names:
            vals = []
            for n in clients:
                m = med.get((c, n, d))
                vals += [f"{m['tps']:.1f}" if m else "?", f"{m['lat_p99_ms']:.3f}" if m else "?"]
            f.write(f"\"{label}\" " + " ".join(vals) + "\n")
    tps_cols = ", ".join(
        f"'chart.dat' using {2 + 2 * i}:xtic(1) title '{n} client{'s' if n > 1 else ''}'"
        for i, n in enumerate(clients))
    p99_cols = ", ".join(
        f"'chart.dat' using {3 + 2 * i}:xtic(1) title '{n} client{'s' if n > 1 else ''}'"
        for i, n in enumerate(clients))
    gp = f"""set terminal png size 1400,900 font ",10" noenhanced
set output 'chart.png'
set datafile missing '?'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set key top right
set grid ytics
set xtics rotate by -35 scale 0
set multiplot layout 2,1 title "eo benchmark: medians (synchronous_commit = on, {base}% duplicates unless marked)"
set ylabel 'messages per second'
set yrange [0:*]
plot {tps_cols}
set ylabel 'p99 latency, ms'
plot {p99_cols}
unset multiplot
"""
    with open(os.path.join(outdir, "chart.gp"), "w") as f:
        f.write(gp)
    subprocess.run(["gnuplot", "chart.gp"], cwd=outdir, check=True)


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "row":
        r = cmd_row(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:])
        print(f"tps {r['tps']}  p50 {r['lat_p50_ms']} ms  p99 {r['lat_p99_ms']} ms  "
              f"WAL {r['wal_bytes_per_msg']} B/msg  key dead/msg {r['key_dead_per_msg'] or '-'}  "
              f"dup share {r['dup_share'] or '-'}  [{r['status']}]")
    elif len(sys.argv) == 5 and sys.argv[1] == "summary":
        bad = cmd_summary(sys.argv[2], sys.argv[3], sys.argv[4])
        sys.exit(1 if bad else 0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
