#!/usr/bin/env python3
"""bench/analyze.py -- numbers for bench/run.sh.

  analyze.py row CSV LOG_PREFIX PGBENCH_OUT key=value ...
      Append one run to CSV (header written if the file is new): tps and the
      transaction count from pgbench's output, p50/p99/mean latency from the
      per-transaction logs (LOG_PREFIX.*), and the per-message figures
      derived from the server counters passed as key=value.

  analyze.py lat LOG_PREFIX PGBENCH_OUT [FROM TO]
      key=value latency figures of one pgbench run (txns, tps, p50/p99/max
      ms), and with FROM/TO (epoch seconds) of the transactions in flight
      at some moment of [FROM, TO] (op_n, op_p99_ms, op_max_ms).

  analyze.py summary CSV OUTDIR META
      Medians per contender, the medians of pairwise ratios (each ratio taken
      within one round, same clients and duplicate share), the targets of
      the targets marked met/missed, medians.csv, summary.md and chart.png
      (gnuplot); plus the sections and targets of the other parts from the
      CSVs that bench/parts.sh wrote into OUTDIR (relay.csv, retention_*.csv,
      scale.csv, reclaim.csv).  META is a file of key=value lines describing
      the run.
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
    "eo_noresult_field": "eo_noresult with the claim as a field in the select list: "
                         "SELECT (eo_claim(k)).status (no FunctionScan)",
    "eo_emit": "eo: eo_claim, change, eo_emit, eo_complete (default outbox: doorbell, no NOTIFY)",
    "eo_emit_notify": "eo + emit, outbox notify => true (NOTIFY for LISTEN)",
    "eo_lease": "eo lease mode: claim txn, then change + complete(token)",
    "eo_nocount": "eo with eo.track_counts = off (no counters: what counting costs)",
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
    # in the default configuration
    ("eo + emit vs hand-written outbox, tps", "eo_emit", "hand_outbox", "base", "tps", ">=", 1.00),
    ("eo + emit vs PgQ, tps", "eo_emit", "hand_pgq", "base", "tps", ">=", 1.10),
    ("eo + emit (notify => true, LISTEN) vs hand-written outbox, tps", "eo_emit_notify", "hand_outbox", "base", "tps", ">=", 1.00),
    ("eo lease mode vs hand-written two-transaction, tps", "eo_lease", "hand_lease", "base", "tps", ">=", 1.00),
    ("eo with counters vs eo.track_counts = off, tps", "eo", "eo_nocount", "base", "tps", ">=", 0.98),
    ("eo in a scope vs eo without one, tps", "eo_scoped", "eo", "base", "tps", ">=", 0.98),
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
    if not os.path.exists(csv_path):
        return []
    with open(csv_path, newline="") as f:
        return [r for r in csv.DictReader(f)]


def cmd_lat(log_prefix, pgbench_out, t_from=None, t_to=None):
    """Latency of a pgbench run from its per-transaction logs: all
    transactions, and (with t_from/t_to, epoch seconds) those that were in
    flight at some moment of [t_from, t_to].  Prints key=value pairs."""
    txns = []      # (start, end, latency_us)
    for path in glob.glob(log_prefix + ".[0-9]*"):
        with open(path) as f:
            for line in f:
                p = line.split()
                # client_id transaction_no time_us script_no epoch epoch_us
                if len(p) >= 6 and p[2].isdigit():
                    end = int(p[4]) + int(p[5]) / 1e6
                    txns.append((end - int(p[2]) / 1e6, end, int(p[2])))
    out = open(pgbench_out, encoding="utf-8", errors="replace").read() if pgbench_out else ""
    m = re.search(r"^tps = ([\d.]+) \(without initial connection time\)", out, re.M)
    res = {"txns": len(txns), "tps": m.group(1) if m else "nan"}
    if txns:
        res["first_s"] = f"{min(t[0] for t in txns):.3f}"
        res["last_s"] = f"{max(t[1] for t in txns):.3f}"

    def stats(prefix, sel):
        lat = sorted(t[2] for t in sel)
        res[prefix + "n"] = len(lat)
        for k, v in (("p50_ms", pct(lat, 50)), ("p99_ms", pct(lat, 99)),
                     ("max_ms", lat[-1] if lat else float("nan"))):
            res[prefix + k] = f"{v / 1000:.3f}"

    stats("", txns)
    if t_from is not None:
        stats("op_", [t for t in txns if t[1] >= t_from and t[0] <= t_to])
    print(" ".join(f"{k}={v}" for k, v in res.items()))


def fl(r, k):
    try:
        return float(r[k])
    except (KeyError, ValueError, TypeError):
        return float("nan")


def median(vals):
    vals = [v for v in vals if not math.isnan(v)]
    return statistics.median(vals) if vals else float("nan")


def fmt_bytes(b):
    if b is None or (isinstance(b, float) and math.isnan(b)):
        return "n/a"
    for unit, f in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if abs(b) >= f:
            return f"{b / f:,.1f} {unit}"
    return f"{b:,.0f} B"


def verdict(value, op, goal):
    if value is None or math.isnan(value):
        return "not measured"
    return "met" if {">=": value >= goal, "<=": value <= goal, "<": value < goal}[op] else "missed"


def per_round_ratios(rows, key, num, den, metric):
    """num/den of `metric` within each round (rows: dicts with round, key)."""
    by_round = {}
    for r in rows:
        by_round.setdefault(r["round"], {})[r[key]] = metric(r)
    out = []
    for d in by_round.values():
        if num in d and den in d and d[den] and not math.isnan(d[num] / d[den]):
            out.append(d[num] / d[den])
    return out


RELAY_DESC = {
    "eo_1slot": "eo relay, outbox with 1 slot: eo_relay_fetch + eo_relay_ack",
    "eo_8slots": "eo relay, outbox with 8 slots (the default): eo_relay_fetch + eo_relay_ack",
    "eo_8slots_wide": "eo relay, 8 slots, one relay fetching from all of them per call "
                      "(eo_relay_fetch with slots => 8, an ack per slot's token)",
    "eo_8slots_2relays": "eo relay, 8 slots, two relays side by side in the group "
                         "(informative: no target; time from the first start to the last end)",
    "pgq": "PgQ: next_batch + get_batch_events + finish_batch",
    "hand": "hand-written: SELECT ... FOR UPDATE SKIP LOCKED, UPDATE processed = true",
}


# (label, numerator, denominator, goal): the targets of the part where the
# CPU decides (issue 22), tps ratios within a round.
CPUBOUND_TARGETS = [
    ("eo vs hand-written", "eo", "hand", 1.20),
    ("eo without result vs minimal hand-written", "eo_noresult", "hand_min", 1.10),
    ("the same, the claim as a field (SELECT (eo_claim(k)).status)", "eo_noresult_field", "hand_min", 1.10),
]


def section_cpubound(outdir, meta, T):
    every = load(os.path.join(outdir, "cpubound.csv"))
    rows = [r for r in every if r["status"] == "ok"]
    L = ["\n## Where the CPU decides\n"]
    L.append(f"The claim contenders again with `synchronous_commit = off` for the benchmark role "
             f"(no commit waits for the disk), {meta.get('cpubound_rounds')} alternating rounds of "
             f"{meta.get('duration')} s at {', '.join(meta.get('cpubound_clients', '').split())} "
             f"clients, the same "
             f"delivery stream ({meta.get('dup_pct')}% duplicates), the same reset before each run. "
             f"Median over rounds; the ratios are taken within a round. `bench/cpu.sh` counts the "
             f"same transactions in instructions.\n")
    groups = {}
    for r in rows:
        groups.setdefault((r["contender"], int(r["clients"])), []).append(r)
    if groups:
        L.append("| contender | clients | tps | p50 ms | p99 ms | WAL B/msg | runs |")
        L.append("|---|---:|---:|---:|---:|---:|---:|")
        for (c, n) in sorted(groups, key=lambda k: (k[1], ORDER.index(k[0]) if k[0] in ORDER else 99)):
            rs = groups[(c, n)]
            m = {k: median([fl(r, k) for r in rs]) for k in ("tps", "lat_p50_ms", "lat_p99_ms", "wal_bytes_per_msg")}
            L.append(f"| {c} | {n} | {fnum(m['tps'])} | {fnum(m['lat_p50_ms'], 3)} | "
                     f"{fnum(m['lat_p99_ms'], 3)} | {fnum(m['wal_bytes_per_msg'], 0)} | {len(rs)} |")
        L.append("\nContenders:\n")
        for c in ORDER:
            if any(k[0] == c for k in groups):
                L.append(f"- `{c}`: {DESCRIPTIONS[c]}")
    for r in every:
        if r["status"] != "ok":
            L.append(f"\n**Run failed:** round {r['round']} {r['contender']} c={r['clients']}: {r['status']}")
    wanted = sorted({int(c) for c in meta.get("cpubound_clients", "").split()} |
                    {int(r["clients"]) for r in rows})
    for label, num, den, goal in CPUBOUND_TARGETS:
        for n in wanted or [None]:
            sel = [r for r in rows if n is not None and int(r["clients"]) == n]
            rs = per_round_ratios(sel, "contender", num, den, lambda r: fl(r, "tps"))
            m = statistics.median(rs) if rs else float("nan")
            who = f", {n} client{'s' if n != 1 else ''}" if n is not None else ""
            T.append((f"CPU-bound (synchronous_commit = off){who}: {label}, tps",
                      f"{m:.3f}x (rounds {min(rs):.2f}-{max(rs):.2f})" if rs else "n/a",
                      f">= {goal:.1f}x", verdict(m, ">=", goal) if rs else "not measured"))
    return L


def section_relay(outdir, meta, T):
    rows = [r for r in load(os.path.join(outdir, "relay.csv")) if r["status"] == "ok"]
    bad = [r for r in load(os.path.join(outdir, "relay.csv")) if r["status"] != "ok"]
    L = ["\n## Relay consumption\n"]
    ev = lambda r: fl(r, "events") / fl(r, "secs") if fl(r, "secs") else float("nan")
    n = meta.get("relay_events", "?")
    L.append(f"The same {int(n):,} events (1,000 aggregates, a small jsonb payload), loaded in "
             f"transactions of {int(meta.get('relay_page', 0)):,} (one PgQ tick per transaction), "
             f"drained by one consumer: a plpgsql procedure in the server that commits after "
             f"every batch (no client round trips for anyone). eo fetches pages of "
             f"{int(meta.get('relay_page', 0)):,} events with a 1 min lease in one consumer group; "
             f"PgQ batches are its ticks; the hand-written relay takes "
             f"{int(meta.get('relay_hand_batch', 0)):,} rows per batch with a partial index on the "
             f"pending rows. Runs as the superuser; a CHECKPOINT before each drain. "
             f"Median over {meta.get('relay_rounds', '?')} rounds (alternating order); the load is "
             f"not part of the drain time.\n")
    L.append("| method | events/s | range | drain s | WAL B/event | batches | load s | runs |")
    L.append("|---|---:|---|---:|---:|---:|---:|---:|")
    meds = {}
    for m in RELAY_DESC:
        rs = [r for r in rows if r["method"] == m]
        if not rs:
            continue
        e = [ev(r) for r in rs]
        meds[m] = median(e)
        L.append(f"| {m} | {fnum(median(e), 0)} | {fnum(min(e), 0)}-{fnum(max(e), 0)} | "
                 f"{fnum(median([fl(r, 'secs') for r in rs]), 3)} | "
                 f"{fnum(median([fl(r, 'wal_bytes') / fl(r, 'events') for r in rs]), 1)} | "
                 f"{fnum(median([fl(r, 'batches') for r in rs]), 0)} | "
                 f"{fnum(median([fl(r, 'load_secs') for r in rs]), 1)} | {len(rs)} |")
    L.append("")
    for m, d in RELAY_DESC.items():
        if m in meds:
            L.append(f"- `{m}`: {d}")
    for r in bad:
        L.append(f"- round {r['round']} {r['method']}: **failed**: {r['status']}")
    for label, num, den, op, goal in (
            ("relay: eo (1 slot) vs PgQ batch consumption, events/s", "eo_1slot", "pgq", ">=", 1.0),
            ("relay: eo (8 slots) vs PgQ batch consumption, events/s", "eo_8slots", "pgq", ">=", 1.0),
            ("relay: eo (8 slots, one relay fetching all) vs PgQ batch consumption, events/s", "eo_8slots_wide", "pgq", ">=", 1.0),
            ("relay: eo (8 slots, two relays) vs PgQ batch consumption, events/s", "eo_8slots_2relays", "pgq", ">=", 1.5),
            ("relay: eo (1 slot) vs hand-written SKIP LOCKED relay, events/s (\"several times\" read as 3x)",
             "eo_1slot", "hand", ">=", 3.0),
            ("relay: eo (8 slots) vs hand-written SKIP LOCKED relay, events/s (\"several times\" read as 3x)",
             "eo_8slots", "hand", ">=", 3.0)):
        rs = per_round_ratios(rows, "method", num, den, ev)
        if rs:
            m = statistics.median(rs)
            T.append((label, f"{m:.3f}x ({fnum(meds.get(num), 0)} vs {fnum(meds.get(den), 0)} events/s; "
                             f"rounds {min(rs):.2f}-{max(rs):.2f})", f"{op} {goal:.1f}x", verdict(m, op, goal)))
        else:
            T.append((label, "n/a", f"{op} {goal:.1f}x", "not measured"))
    return L


def section_retention(outdir, meta, T):
    ops = load(os.path.join(outdir, "retention_ops.csv"))
    lo = load(os.path.join(outdir, "retention_load.csv"))
    L = ["\n## Retention\n"]
    keys = meta.get("retention_keys", "?")
    L.append(f"{int(keys):,} expired keys removed three ways. eo: keys claimed through `eo_claim` "
             f"({int(meta.get('retention_chunk', 0)):,} per transaction), then in one session "
             f"`eo.partition_interval = 1`, `eo_maintain()` (switch), 1.2 s later with "
             f"`eo.retention = 1` (interval back at 1 day, so that no switch is measured) the "
             f"`eo_maintain()` that retires the generation, then the one that drops it (retried "
             f"every 100 ms while a claim that began before the retirement still holds it; "
             f"\"tries\" counts the calls). DELETE: the same keys in `processed` (text primary key, "
             f"created 10 days ago, vacuumed), `DELETE ... WHERE created_at < now() - '7 days'` then "
             f"`VACUUM`. pg_partman 4.x: the same rows in one daily partition of a native-partitioned "
             f"table (primary key (key, created_at)), `run_maintenance` with retention 7 days. "
             f"A CHECKPOINT before each operation; the worker is kept away from the benchmark "
             f"database meanwhile (`eo.databases`). Sizes: eo, the sum of `eo_partitions.bytes`; "
             f"DELETE, `pg_total_relation_size('processed')`; partman, the sum over the partitions.\n")
    L.append("Operation alone (nothing else running):\n")
    L.append("| contender | step | time s | WAL | size before | size after | tries | load of the keys s |")
    L.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in ops:
        if r["phase"] == "quiet":
            L.append(f"| {r['contender']} | {r['step']} | {fnum(fl(r, 'secs'), 3)} | "
                     f"{fmt_bytes(fl(r, 'wal_bytes'))} | {fmt_bytes(fl(r, 'size_before'))} | "
                     f"{fmt_bytes(fl(r, 'size_after'))} | {r['attempts']} | {fnum(fl(r, 'load_secs'), 1)} |")
    L.append(f"\nClaim load ({meta.get('retention_clients', '?')} pgbench clients, the contender's own "
             f"claim script: `eo.sql` for eo, `hand.sql` on `processed` for DELETE, `hand.sql` on the "
             f"partman table for partman; {meta.get('retention_window', '?')} s windows), without the "
             f"operation (baseline) and with it starting {meta.get('retention_lead', '?')} s in. "
             f"\"in flight during the operation\": the transactions that overlapped it.\n")
    L.append("| contender | baseline p50 / p99 / max ms | window p50 / p99 / max ms | p99 window/baseline | "
             "operation at s (time s under load) | in flight during the operation: n, p99 / max ms |")
    L.append("|---|---|---|---:|---|---|")
    got = {}
    for c in ("eo", "delete", "partman"):
        b = next((r for r in lo if r["contender"] == c and r["window"] == "baseline"), None)
        w = next((r for r in lo if r["contender"] == c and r["window"] == "window"), None)
        if not (b and w):
            continue
        ratio = fl(w, "p99_ms") / fl(b, "p99_ms") if fl(b, "p99_ms") else float("nan")
        got[c] = (b, w, ratio)
        under = [r for r in ops if r["contender"] == c and r["phase"] == "load"]
        steps = ", ".join(f"{r['step']} {fnum(fl(r, 'secs'), 3)}" for r in under)
        L.append(f"| {c} | {b['p50_ms']} / {b['p99_ms']} / {b['max_ms']} | {w['p50_ms']} / {w['p99_ms']} / "
                 f"{w['max_ms']} | {ratio:.2f}x | {w['op_start_s']}-{w['op_end_s']} ({steps}) | "
                 f"{w['op_txns']}, {w['op_p99_ms']} / {w['op_max_ms']} |")

    def q(c, step, k):
        r = next((r for r in ops if r["contender"] == c and r["phase"] == "quiet" and r["step"] == step), None)
        return fl(r, k) if r else float("nan")

    drop_s, drop_w = q("eo", "drop", "secs"), q("eo", "drop", "wal_bytes")
    del_s = q("delete", "delete", "secs") + q("delete", "vacuum", "secs")
    del_w = q("delete", "delete", "wal_bytes") + q("delete", "vacuum", "wal_bytes")
    pm_s, pm_w = q("partman", "run_maintenance", "secs"), q("partman", "run_maintenance", "wal_bytes")
    if not math.isnan(drop_s):
        L.append(f"\neo's drop against DELETE + VACUUM: {fnum(drop_s, 3)} s vs {fnum(del_s, 3)} s "
                 f"({fnum(drop_s / del_s if del_s else float('nan'), 4)}x), WAL {fmt_bytes(drop_w)} vs "
                 f"{fmt_bytes(del_w)}; against pg_partman: {fnum(pm_s, 3)} s, WAL {fmt_bytes(pm_w)}. "
                 f"eo's retire call (a scan of the generation for unfinished or recent keys) took "
                 f"{fnum(q('eo', 'retire', 'secs'), 3)} s and wrote {fmt_bytes(q('eo', 'retire', 'wal_bytes'))}.")
    T.append((f"retention: eo drop of {int(keys):,} expired keys, time (\"well under a second\" read as < 0.5 s)",
              f"{fnum(drop_s, 3)} s (DELETE + VACUUM {fnum(del_s, 3)} s)", "< 0.5 s", verdict(drop_s, "<", 0.5)))
    T.append((f"retention: eo drop of {int(keys):,} expired keys, WAL (\"a few hundred kB at most\" read as <= 512 kB)",
              f"{fmt_bytes(drop_w)} (DELETE + VACUUM {fmt_bytes(del_w)})", "<= 512 kB",
              verdict(drop_w / 1024 if not math.isnan(drop_w) else drop_w, "<=", 512)))
    if "eo" in got:
        b, w, ratio = got["eo"]
        T.append(("retention: claim p99 during the eo retire + drop window vs without",
                  f"{ratio:.2f}x ({w['p99_ms']} vs {b['p99_ms']} ms; max {w['max_ms']} vs {b['max_ms']} ms)",
                  "<= 2.0x", verdict(ratio, "<=", 2.0)))
    else:
        T.append(("retention: claim p99 during the eo retire + drop window vs without", "n/a", "<= 2.0x",
                  "not measured"))
    return L


def section_scale(outdir, meta, T):
    rows = [r for r in load(os.path.join(outdir, "scale.csv")) if r["status"] == "ok"]
    bad = [r for r in load(os.path.join(outdir, "scale.csv")) if r["status"] != "ok"]
    L = ["\n## Scale\n"]
    gens = meta.get("scale_gens", "8")
    big, s1, sn = f"big_{gens}gen", "small_1gen", f"small_{gens}gen"
    L.append(f"Claims/s of the `eo` contender (claim, change, complete; 1 client, every key new, so "
             f"each claim looks in every live generation and finds nothing) with "
             f"{int(meta.get('scale_small_keys', 0)):,} keys stored in one generation, the same number "
             f"over {gens} generations, and {int(meta.get('scale_keys', 0)):,} keys over {gens} "
             f"generations; each in its own database, loaded through `eo_claim` in big transactions "
             f"with `eo_maintain()` switching generations between chunks, then ANALYZE. "
             f"{meta.get('scale_rounds', '?')} rounds x {meta.get('scale_duration', '?')} s, "
             f"alternating order. Loading: " + "; ".join(meta.get("scale_load", "").split("|")) + ".\n")
    L.append("| setting | keys stored (first run) | generations | tps | p50 ms | p99 ms | "
             "key-table seq scans (worker passes included) | runs |")
    L.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    meds = {}
    for st in (s1, sn, big):
        rs = [r for r in rows if r["setting"] == st]
        if not rs:
            continue
        meds[st] = median([fl(r, "tps") for r in rs])
        L.append(f"| {st} | {int(min(fl(r, 'stored_keys') for r in rs)):,} | {rs[0]['generations']} | "
                 f"{fnum(meds[st])} | {fnum(median([fl(r, 'p50_ms') for r in rs]), 3)} | "
                 f"{fnum(median([fl(r, 'p99_ms') for r in rs]), 3)} | "
                 f"{int(sum(fl(r, 'key_seq_scans') for r in rs))} | {len(rs)} |")
    for r in bad:
        L.append(f"\n- round {r['round']} {r['setting']}: **failed**: {r['status']}")
    for label, den in ((f"scale: claims/s, {int(meta.get('scale_keys', 0)):,} keys over {gens} generations "
                        f"vs {int(meta.get('scale_small_keys', 0)):,} keys in 1 generation", s1),
                       (f"scale: claims/s, {int(meta.get('scale_keys', 0)):,} keys vs "
                        f"{int(meta.get('scale_small_keys', 0)):,} keys, both over {gens} generations", sn)):
        rs = per_round_ratios(rows, "setting", big, den, lambda r: fl(r, "tps"))
        if rs:
            m = statistics.median(rs)
            T.append((label, f"{m:.3f}x ({fnum(meds.get(big))} vs {fnum(meds.get(den))} tps; "
                             f"rounds {min(rs):.2f}-{max(rs):.2f})", ">= 0.8x", verdict(m, ">=", 0.8)))
        else:
            T.append((label, "n/a", ">= 0.8x", "not measured"))
    return L


def section_scrape(outdir, meta, T):
    rows = load(os.path.join(outdir, "scrape.csv"))
    L = ["\n## Scrape cost\n"]
    L.append(f"The exporter queries of `monitoring/queries.yaml` (the four eo_metrics views) against "
             f"{meta.get('scrape_small_keys')} and {meta.get('scrape_keys')} stored keys, each database "
             f"also holding 10 live leases, 10 failed keys and an outbox with one group and 1,000 events "
             f"(half acknowledged); timed in the server, {meta.get('scrape_n')} scrapes per measurement, "
             f"{meta.get('scrape_rounds')} rounds in alternating order; ms per whole scrape. 0.1.0's "
             f"`eo_keys_overview`, which reads every key, beside them for contrast.\n")
    by = {}
    for r in rows:
        by.setdefault(r["setting"], []).append(r)
    if rows:
        L.append("| setting | keys | exporter scrape ms (median, range) | eo_keys_overview ms (median) |")
        L.append("|---|---:|---|---:|")
        for s in ("small", "big"):
            rs = by.get(s, [])
            if not rs:
                continue
            ex = [fl(r, "exporter_ms") for r in rs]
            ov = [fl(r, "overview_ms") for r in rs]
            L.append(f"| {s} | {rs[0]['keys']} | {statistics.median(ex):.2f} ({min(ex):.2f}-{max(ex):.2f}) | "
                     f"{statistics.median(ov):.1f} |")
    ratios = []
    for rnd in sorted({r["round"] for r in rows}):
        s = [fl(r, "exporter_ms") for r in rows if r["round"] == rnd and r["setting"] == "small"]
        b = [fl(r, "exporter_ms") for r in rows if r["round"] == rnd and r["setting"] == "big"]
        if s and b and s[0] > 0:
            ratios.append(b[0] / s[0])
    m = statistics.median(ratios) if ratios else float("nan")
    T.append((f"scrape cost: exporter queries at {meta.get('scrape_keys')} vs {meta.get('scrape_small_keys')} keys",
              f"{m:.3f}x" + (f" (rounds {min(ratios):.2f}-{max(ratios):.2f})" if ratios else ""),
              "<= 1.50x", verdict(m, "<=", 1.5) if ratios else "not measured"))
    return L


def section_reclaim(outdir, meta, T):
    rows = load(os.path.join(outdir, "reclaim.csv"))
    L = ["\n## Lease reclaim delay\n"]
    nap = float(meta.get("reclaim_naptime_s", "1"))
    L.append(f"With the worker on and `eo.naptime = {meta.get('reclaim_naptime_s')}s` (ALTER SYSTEM + "
             f"reload for this part only): {meta.get('reclaim_leases')} keys claimed with a "
             f"{meta.get('reclaim_lease_s')} s lease, one every {meta.get('reclaim_spread_ms')} ms, "
             f"never completed; every {meta.get('reclaim_poll_ms')} ms `eo_status` of each key not yet "
             f"seen failed. Delay = the reclaimed row's `updated_at` (the reclaiming pass's clock) minus "
             f"the lease expiry `eo_claim` returned; \"seen\" = the poll that first saw it failed.\n")
    d = sorted(fl(r, "delay_ms") for r in rows if r["reclaimed_at"])
    sd = sorted(fl(r, "seen_delay_ms") for r in rows if r["seen_at"])
    never = sum(1 for r in rows if not r["seen_at"])
    if rows:
        L.append("| leases | reclaimed | never reclaimed | delay p50 / p99 / max ms | min ms | seen p50 / p99 / max ms |")
        L.append("|---:|---:|---:|---|---:|---|")
        L.append(f"| {len(rows)} | {len(d)} | {never} | {fnum(pct(d, 50), 0)} / {fnum(pct(d, 99), 0)} / "
                 f"{fnum(d[-1] if d else float('nan'), 0)} | {fnum(d[0] if d else float('nan'), 0)} | "
                 f"{fnum(pct(sd, 50), 0)} / {fnum(pct(sd, 99), 0)} / {fnum(sd[-1] if sd else float('nan'), 0)} |")
        if d and d[0] < 0:
            L.append("\n**A lease was reclaimed before it expired.**")
    goal = 2 * nap * 1000
    p99 = pct(d, 99) if d and not never else float("nan")
    T.append((f"lease reclaim: p99 delay after expiry, eo.naptime = {meta.get('reclaim_naptime_s')} s "
              f"(within lease + 2 x naptime)",
              f"{fnum(p99, 0)} ms (p50 {fnum(pct(d, 50), 0)} ms, max {fnum(d[-1] if d else float('nan'), 0)} ms)"
              + (f"; {never} never reclaimed" if never else ""),
              f"<= {goal:.0f} ms", verdict(p99, "<=", goal) if rows else "not measured"))
    return L


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
    if not rows:
        L.append(f"\n**The pgbench contenders did not run (PARTS=\"{meta.get('parts', '')}\"): "
                 f"the table and the targets below are empty.**")
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

    L.append("\n## Targets\n")
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
    parts = meta.get("parts", "contenders cpubound relay retention scale reclaim scrape").split()
    failed = meta.get("parts_failed", "").split()
    T, S = [], []
    for name, fn in (("cpubound", section_cpubound), ("relay", section_relay), ("retention", section_retention),
                     ("scale", section_scale), ("reclaim", section_reclaim),
                     ("scrape", section_scrape)):
        if name in parts:
            S += fn(outdir, meta, T)
            if name in failed:
                S.append(f"\n**This part failed before it finished: its figures are incomplete "
                         f"(see the list of what was not measured).**")
    if T:
        L.append("\nWhere the CPU decides (issue 22), relay, retention and scale, lease reclaim "
                 "(DESIGN); details in the sections below.\n")
        L.append("| target | measured | goal | verdict |")
        L.append("|---|---|---|---|")
        for label, measured, goal, v in T:
            L.append(f"| {label} | {measured} | {goal} | " + (f"**{v}** |" if v != "not measured" else f"{v} |"))
            verdicts[v] += 1
    L.append(f"\n{verdicts['met']} met, {verdicts['missed']} missed, "
             f"{verdicts['not measured']} not measured.")
    L += S

    if meta.get("parts_time"):
        L.append("\nTime per part (s): " + ", ".join(meta["parts_time"].split())
                 + f"; whole run {meta.get('total_s', '?')} s.")
    L.append("\n## Not measured\n")
    todo = [line.strip() for line in meta.get("todo", "").split("|") if line.strip()]
    for line in todo:
        L.append(f"- {line}")
    if not todo:
        L.append("Nothing: every part ran.")
    if bad:
        L.append("\n## Runs that failed\n")
        for r in bad:
            L.append(f"- round {r['round']} {r['contender']} c={r['clients']} "
                     f"dup={r['dup_pct']}: {r['status']}")
    L.append("\nRaw figures: `runs.csv` (one line per run), `medians.csv`; cpubound.csv, relay.csv, "
             "retention_ops.csv, retention_load.csv, scale.csv, reclaim.csv for the other parts"
             + ("; chart: `chart.png`." if med else "."))
    if med:
        L.append("\n![tps and p99 latency per contender](chart.png)")
    with open(os.path.join(outdir, "summary.md"), "w") as f:
        f.write("\n".join(L) + "\n")
    if med:
        chart(outdir, med, base, storm, clients)
    return bad + failed


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
    elif len(sys.argv) in (4, 6) and sys.argv[1] == "lat":
        cmd_lat(sys.argv[2], sys.argv[3],
                *(float(x) for x in sys.argv[4:6]))
    elif len(sys.argv) == 5 and sys.argv[1] == "summary":
        bad = cmd_summary(sys.argv[2], sys.argv[3], sys.argv[4])
        sys.exit(1 if bad else 0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
