"""bench/http/profiles.py LOGS: where the applications' CPU went, from a run of
bench/http.sh with HTTP_PROFILE=1 (cProfile's <stack>-<contender>.prof,
node --cpu-prof's cpuprof-<stack>-<contender>/), per contender in µs per
request (the requests of every run of that server, warm-up included), by
package: the self time of the functions of each. cProfile's figures carry
its own overhead (several times the unprofiled CPU): compare contenders,
not absolute numbers.
"""
import collections
import glob
import json
import os
import pstats
import sys

logs = sys.argv[1]


def requests(stack, contender):
    n = 0
    for f in glob.glob(f"{logs}/warm-{stack}-{contender}.json") + glob.glob(f"{logs}/run-*-{stack}-*-{contender}.json"):
        try:
            n += json.load(open(f))["all"]
        except (ValueError, KeyError):
            pass
    return n


def python_package(fn, name):
    if fn.startswith("~") or fn.startswith("<"):
        return "(C functions)" if fn.startswith("~") else "(python startup)"
    if "eo_client" in fn:
        return "eo_client"
    if "bench/http" in fn:
        return "the app"
    if "dist-packages/" in fn:
        return fn.split("dist-packages/")[1].split("/")[0]
    if "/asyncio/" in fn:
        return "asyncio"
    return "stdlib " + os.path.basename(fn)


def node_package(url, fn):
    if not url:
        return fn if fn.startswith("(") else "(native)"
    if "/node_modules/" in url:
        return url.split("/node_modules/")[-1].split("/")[0]
    if "clients/node/dist" in url:
        return "eo-client"
    if "bench/http" in url:
        return "the app"
    if url.startswith("node:internal/"):
        return "node internal/" + url[14:].split("/")[0]
    if url.startswith("node:"):
        return "node " + url[5:]
    return url


def show(title, agg, n):
    total = sum(agg.values())
    print(f"{title}: {n} requests, {total / n * 1e6:.0f} µs of profiled CPU per request")
    for k, v in agg.most_common(10):
        print(f"    {k:<30} {v / n * 1e6:7.0f} µs/req")


for prof in sorted(glob.glob(f"{logs}/*.prof")):
    stack, contender = os.path.basename(prof)[:-5].split("-", 1)
    agg = collections.Counter()
    for (fn, _line, name), (_cc, _nc, tt, _ct, _callers) in pstats.Stats(prof).stats.items():
        if "run_until_complete" in name:       # the event loop's own C time, idle included
            continue
        agg[python_package(fn, name)] += tt
    show(f"{stack} {contender} (cProfile, self time outside the loop's C code)", agg, max(requests(stack, contender), 1))

for d in sorted(glob.glob(f"{logs}/cpuprof-*")):
    stack, contender = os.path.basename(d)[len("cpuprof-"):].split("-", 1)
    agg = collections.Counter()
    for f in glob.glob(f"{d}/*.cpuprofile"):
        p = json.load(open(f))
        nodes = {nd["id"]: nd["callFrame"] for nd in p["nodes"]}
        for sid, dt in zip(p["samples"], p["timeDeltas"]):
            cf = nodes[sid]
            k = node_package(cf["url"], cf["functionName"])
            if k != "(idle)":
                agg[k] += dt / 1e6
    show(f"{stack} {contender} (node --cpu-prof, sampled, idle left out)", agg, max(requests(stack, contender), 1))
