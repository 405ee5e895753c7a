"""Paired A/B of the Lua core's Redis time per job: two checkouts' libraries loaded in one
Redis, called in alternating blocks of jobs, `INFO commandstats` FCALL time read around
each block (so both see the same machine load). Prints each side's median and the paired
median ratio B/A: of the whole, of the puts, and of the drain (pop + complete); then the
same of the server's CPU time (`INFO cpu`, user + sys: the script and the network around
it), which a loaded machine inflates less than FCALL's time, a wall time that counts the
moments the server waits for a core. (Use a server of your own: its whole CPU is counted.)
Last, the single puts alone (each block's k/10 qless `put`s and k/10 put_many of one job,
as `.delay()` makes, each at its own time): FCALL time and server CPU per put; and a pop
of one job with its `complete` (k/10 jobs taken so after the drain): the same per job.

Usage: python scripts/lua-ab.py SRC_A SRC_B PORT [PAIRS]
  SRC_A, SRC_B: the `src` folders of two checkouts (e.g. `git archive BASE src | tar -x`);
  PORT: an empty redis-server of your own on 127.0.0.1 (it is flushed).
"""

import hashlib
import json
import os
import re
import statistics
import sys
import time

import redis

FILES = ["layout.lua", "base.lua", "config.lua", "events.lua", "stats.lua", "worker.lua",
         "job.lua", "queue.lua", "recurring.lua", "limits.lua", "lanner.lua"]

def files(src_root, folder):
    """The checkout's SCRIPT_FILES (read from its script.py), or FILES for older ones."""
    found = re.search(r"SCRIPT_FILES[^=]*= \(([^)]*)\)", open(f"{src_root}/lanner/engines/redis/script.py").read())
    if found:
        return re.findall(r'"([^"]+)"', found.group(1))
    return FILES + (["cluster.lua"] if os.path.exists(f"{folder}/cluster.lua") else []) + ["api.lua"]


def library(src_root):
    """The function library of a checkout's Lua sources, named by its content."""
    folder = f"{src_root}/lanner/engines/redis/lua"
    text = "".join(open(f"{folder}/{n}").read().rstrip("\n") + "\n" for n in files(src_root, folder))
    entry = "return main(KEYS, ARGV)\n"
    assert text.endswith(entry)
    name = "ab_" + hashlib.sha1(text.encode()).hexdigest()[:12]
    return name, f"#!lua name={name}\n" + text.removesuffix(entry) + f"redis.register_function('{name}', main)\n"


c = redis.Redis(port=int(sys.argv[3]), decode_responses=True)
c.flushall(); c.function_flush()
libs = {}
for v, root in (("A", sys.argv[1]), ("B", sys.argv[2])):
    name, code = library(root); c.function_load(code); libs[v] = name

def usec():
    return float(c.info("commandstats").get("cmdstat_fcall", {"usec": 0})["usec"])

def cpu_usec():
    info = c.info("cpu")
    return (float(info["used_cpu_user"]) + float(info["used_cpu_sys"])) * 1e6

def block(v, n, k):
    """Put k jobs (put_many) and k/5 by single puts, then drain them: the FCALL time of
    the puts and of the drain (pop_wait + complete_many)."""
    name = libs[v]; q = f"q{v}"; now = str(time.time())
    jobs = [{"queue": q, "jid": f"{v}{n}-{i}", "klass": "K", "data": "{}"} for i in range(k)]
    before, cpu_before = usec(), cpu_usec()
    c.fcall(name, 0, "lanner.put_many", now, "", json.dumps(jobs))
    batch, cpu_batch = usec(), cpu_usec()
    for i in range(k // 10):  # single puts too: qless's put, and a put_many of one (`.delay()`)
        c.fcall(name, 0, "put", str(time.time()), "", q, f"{v}{n}-s{i}", "K", "{}", "0")
        one = [{"queue": q, "jid": f"{v}{n}-d{i}", "klass": "K", "data": "{}"}]
        c.fcall(name, 0, "lanner.put_many", str(time.time()), "", json.dumps(one))
    middle, cpu_middle = usec(), cpu_usec()
    singles[v].append(((middle - batch) / (k // 5), (cpu_middle - cpu_batch) / (k // 5)))
    while True:
        got = json.loads(c.fcall(name, 0, "lanner.pop_wait", now, q, "w", "20", "0")[0])
        if not got: break
        c.fcall(name, 0, "lanner.complete_many", now, "w", q, *[j["jid"] for j in got])
    end, cpu_end = usec(), cpu_usec()
    # Then single pops and completes (a worker of batch 1): k/10 jobs, each popped alone.
    c.fcall(name, 0, "lanner.put_many", now, "", json.dumps(
        [{"queue": q, "jid": f"{v}{n}-p{i}", "klass": "K", "data": "{}"} for i in range(k // 10)]))
    start, cpu_start = usec(), cpu_usec()
    for i in range(k // 10):
        at = str(time.time())
        got = json.loads(c.fcall(name, 0, "lanner.pop_wait", at, q, "w", "1", "0")[0])
        c.fcall(name, 0, "complete", at, got[0]["jid"], "w", q, "{}")
    single_drains[v].append(((usec() - start) / (k // 10), (cpu_usec() - cpu_start) / (k // 10)))
    return middle - before, end - middle, cpu_middle - cpu_before, cpu_end - cpu_middle

pairs = int(sys.argv[4]) if len(sys.argv) > 4 else 100
k = 50
singles = {"A": [], "B": []}  # (FCALL us, server CPU us) per single put, per block
single_drains = {"A": [], "B": []}  # the same per pop of one job and its complete
PHASES = ("all", "puts", "drain", "cpu all", "cpu puts", "cpu drain")
per = {(v, phase): [] for v in ("A", "B") for phase in PHASES}
for n in range(pairs):
    order = ("A", "B") if n % 2 == 0 else ("B", "A")
    for v in order:
        puts, drain, cpu_puts, cpu_drain = block(v, n, k)
        for phase, spent in (("all", puts + drain), ("puts", puts), ("drain", drain),
                             ("cpu all", cpu_puts + cpu_drain), ("cpu puts", cpu_puts),
                             ("cpu drain", cpu_drain)):
            per[(v, phase)].append(spent / (k * 1.2))
for phase in PHASES:
    for v in ("A", "B"):
        xs = per[(v, phase)]
        print(phase, v, "median %.1f us/job  mean %.1f  p25 %.1f  p75 %.1f" % (statistics.median(xs), statistics.mean(xs), *statistics.quantiles(xs, n=4)[0:3:2]))
    ratios = [b / a for a, b in zip(per[("A", phase)], per[("B", phase)])]
    print(phase, "B/A paired median ratio %.3f" % statistics.median(ratios))
for index, label, table in ((0, "single put", singles), (1, "cpu single put", singles),
                            (0, "pop+complete", single_drains), (1, "cpu pop+complete", single_drains)):
    for v in ("A", "B"):
        xs = [pair[index] for pair in table[v]]
        unit = "us/put" if table is singles else "us/job"
        print(label, v, "median %.1f %s  p25 %.1f  p75 %.1f" % (statistics.median(xs), unit, *statistics.quantiles(xs, n=4)[0:3:2]))
    ratios = [b[index] / a[index] for a, b in zip(table["A"], table["B"])]
    print(label, "B/A paired median ratio %.3f" % statistics.median(ratios))
