"""bench/nats/summary.py runs.csv describe: bench/nats.sh's summary (Markdown).

Medians over the rounds per contender and phase, the ratios of eo to the
hand-written pipeline and to PgQ per round (their median and range), and
the issue's targets as met or missed.
"""
import csv
import statistics
import sys
from datetime import datetime, timezone

rows = list(csv.DictReader(open(sys.argv[1])))
describe = sys.argv[2]
cols = ["events_per_s", "stream_p50_ms", "stream_p99_ms", "effect_p50_ms", "effect_p99_ms",
        "relay_cpu_us", "consumer_cpu_us"]
by = {}
for r in rows:
    by.setdefault((r["contender"], r["phase"]), []).append(r)
phases = [p for p in ["saturation", "paced", "drain"] if any(k[1] == p for k in by)]
contenders = [c for c in ["eo", "eo_base", "hand", "pgq"] if any(k[0] == c for k in by)]
others = [c for c in ["eo_base", "hand", "pgq"] if c in contenders]


def med(c, p, col):
    v = [float(r[col]) for r in by.get((c, p), []) if r[col] not in ("", None)]
    return statistics.median(v) if v else float("nan")


def ratios(p, col, other):
    """eo / other per round, for rounds where both ran."""
    eo = {r["round"]: float(r[col]) for r in by.get(("eo", p), [])}
    ot = {r["round"]: float(r[col]) for r in by.get((other, p), [])}
    return [eo[k] / ot[k] for k in sorted(eo) if k in ot and ot[k] > 0]


def fmt_ratio(v):
    if not v:
        return "-"
    return f"{statistics.median(v):.2f}x ({min(v):.2f}-{max(v):.2f})"


now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M")
print(f"# eo to NATS JetStream, end to end: {now} UTC, eo {describe}\n")
print(f"{len({r['round'] for r in rows})} rounds; medians. Latencies from the producer's commit "
      "(its INSERT's clock_timestamp) to the message stored in JetStream (stream) and to the "
      "effect's transaction in the consumer database (effect). CPU: server time of the relay's "
      "and the consumer's backends per event.\n")
lost = [r for r in rows if int(r["distinct"]) != int(r["produced"]) or int(r["applied"]) != int(r["produced"])]
print(f"Every run: every committed event applied exactly once: {'yes' if not lost else 'NO: ' + str(len(lost)) + ' runs differ'}.\n")
print("| phase | contender | events/s | stream p50 / p99 ms | effect p50 / p99 ms | relay CPU us/event | consumer CPU us/event |")
print("|---|---|---|---|---|---|---|")
for p in phases:
    for c in contenders:
        print(f"| {p} | {c} | {med(c, p, 'events_per_s'):.0f} | {med(c, p, 'stream_p50_ms'):.1f} / "
              f"{med(c, p, 'stream_p99_ms'):.1f} | {med(c, p, 'effect_p50_ms'):.1f} / {med(c, p, 'effect_p99_ms'):.1f} | "
              f"{med(c, p, 'relay_cpu_us'):.0f} | {med(c, p, 'consumer_cpu_us'):.0f} |")
print()
print("| ratio (eo / other, per round: median (range)) | " + " | ".join(f"vs {o}" for o in others) + " |")
print("|---|" + "---|" * len(others))
for p in phases:
    for col, what in [("events_per_s", "events/s"), ("stream_p99_ms", "stream p99"),
                      ("effect_p99_ms", "effect p99"), ("relay_cpu_us", "relay CPU per event"),
                      ("consumer_cpu_us", "consumer CPU per event")]:
        print(f"| {p}: {what} | " + " | ".join(fmt_ratio(ratios(p, col, o)) for o in others) + " |")
print()


def target(name, ok):
    print(f"- {name}: {'met' if ok else 'missed'}")


if "hand" not in contenders or "pgq" not in contenders:
    sys.exit(0)
print("Targets (the forwarder issue):\n")
if "saturation" in phases:
    target("saturation events/s >= 1.5x hand", med("eo", "saturation", "events_per_s") >= 1.5 * med("hand", "saturation", "events_per_s"))
    target("saturation events/s >= 1.3x pgq", med("eo", "saturation", "events_per_s") >= 1.3 * med("pgq", "saturation", "events_per_s"))
    target("saturation effect p99 no worse than either",
           med("eo", "saturation", "effect_p99_ms") <= min(med("hand", "saturation", "effect_p99_ms"),
                                                           med("pgq", "saturation", "effect_p99_ms")))
if "paced" in phases:
    target("paced commit-to-stream p99 <= 50 ms", med("eo", "paced", "stream_p99_ms") <= 50)
target("relay CPU per event <= hand's in every phase",
       all(med("eo", p, "relay_cpu_us") <= med("hand", p, "relay_cpu_us") for p in phases))
