"""The Redis server's CPU per job of a drain's two halves, pop and complete, for several
checkouts' Lua cores side by side (issue 28). Each checkout's library is loaded in one
Redis; in interleaved rounds (the order rotated each round) each side puts K jobs
(`lanner.put_many`, data as a no-op task's envelope), pops them all by
`lanner.pop_wait` of 10, then completes them by `lanner.complete_many` of 10, as a worker
does; `INFO cpu` (user + sys) is read around the pops and around the completions, so each
half gets its own figure. Prints each side's median and first quartile per job, then
each side's paired median ratio to the first (per half, and of the whole drain).

Unlike `lua-ab.py` (whose drain row is pop + complete together, and whose blocks also
put), this one tells which half a change moved: an ablation (a copy of `src` with one
piece taken out) shows what that piece costs. Leave SLOWLOG alone while it runs: with
`slowlog-log-slower-than 0`, Redis 7.0 logs every command a script makes too, which
makes each `redis.call` dearer and skews a comparison towards fewer calls.

Usage: python scripts/drain-ab.py PORT ROUNDS SRC [SRC ...]
  PORT: an empty redis-server of your own on 127.0.0.1 (it is flushed);
  SRC: a checkout's `src` folder (e.g. `git worktree add --detach /tmp/base main`).
"""

import hashlib
import json
import re
import statistics
import sys
import time
from pathlib import Path

import redis

K = 500  # jobs per side per round
DATA = '{"v":1,"args":[]}'  # a no-op task's envelope, as lanner's codec writes it


def library(src_root):
    """The function library of a checkout's Lua sources (its SCRIPT_FILES in order)."""
    root = Path(src_root) / "lanner" / "engines" / "redis"
    listed = re.search(r"SCRIPT_FILES[^=]*= \(([^)]*)\)", (root / "script.py").read_text())
    body = "".join(
        (root / "lua" / name).read_text().rstrip("\n") + "\n"
        for name in re.findall(r'"([^"]+\.lua)"', listed.group(1))
    )
    body = body.removesuffix("return main(KEYS, ARGV)\n")
    name = "dab_" + hashlib.sha256((src_root + body).encode()).hexdigest()[:12]
    return name, f"#!lua name={name}\n{body}redis.register_function('{name}', main)\n"


def main():
    port, rounds, sources = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    client = redis.Redis(port=port, decode_responses=True)
    client.flushall()
    client.function_flush()
    names = []
    for source in sources:
        name, code = library(source)
        client.function_load(code)
        names.append(name)

    def cpu():
        info = client.info("cpu")
        return (float(info["used_cpu_user"]) + float(info["used_cpu_sys"])) * 1e6

    got = {index: {"pop": [], "complete": []} for index in range(len(sources))}
    for round_ in range(rounds):
        order = list(range(len(sources)))
        order = order[round_ % len(order) :] + order[: round_ % len(order)]
        for index in order:
            name, queue = names[index], f"q{index}"
            jobs = [
                {"queue": queue, "jid": f"{index}-{round_}-{n}", "klass": "K", "data": DATA}
                for n in range(K)
            ]
            client.fcall(name, 0, "lanner.put_many", str(time.time()), "", json.dumps(jobs))
            start, held = cpu(), []
            while True:
                reply = client.fcall(
                    name, 0, "lanner.pop_wait", str(time.time()), queue, "w", "10", "0"
                )
                popped = json.loads(reply[0])
                if not popped:
                    break
                held.append([job["jid"] for job in popped])
            middle = cpu()
            for jids in held:
                client.fcall(name, 0, "lanner.complete_many", str(time.time()), "w", queue, *jids)
            end = cpu()
            got[index]["pop"].append((middle - start) / K)
            got[index]["complete"].append((end - middle) / K)

    def quartile(values):
        return statistics.quantiles(values, n=4)[0]

    for index, source in enumerate(sources):
        pops, completes = got[index]["pop"], got[index]["complete"]
        print(
            f"{source}: pop median {statistics.median(pops):.1f} (p25 {quartile(pops):.1f}), "
            f"complete median {statistics.median(completes):.1f} (p25 {quartile(completes):.1f})"
            " µs of server CPU per job"
        )
    for index in range(1, len(sources)):
        for half in ("pop", "complete"):
            ratios = [b / a for a, b in zip(got[0][half], got[index][half], strict=True)]
            print(
                f"{sources[index]} ÷ {sources[0]}, {half}: paired median ratio "
                f"{statistics.median(ratios):.3f}"
            )
        ratios = [
            (got[index]["pop"][n] + got[index]["complete"][n])
            / (got[0]["pop"][n] + got[0]["complete"][n])
            for n in range(rounds)
        ]
        print(
            f"{sources[index]} ÷ {sources[0]}, drain: paired median ratio "
            f"{statistics.median(ratios):.3f}"
        )


if __name__ == "__main__":
    main()
