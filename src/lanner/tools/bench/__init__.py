"""Benchmarks of lanner on this machine: `lanner bench ...` and the helpers behind it.

    cli         the `lanner bench` group: every benchmark's command, registered
    cli_shared  what the commands share: progress bars, SIGTERM, one-line errors, options
                (--url, --json, --jobs, --batch, --samples, -c), results tables, footers
    engine_cli  the commands of engine, depth and shards, and how their results print
    pool_cli    the commands of pool, io, idle and transactional, and how their results print
    servers_cli the commands of kestrel and web, and how their results print
    chord_cli   the commands of chord and chord-chaos, and how their results print
    common      default sizes, errors, progress reporting, the store, the machine record
    stats       percentiles of samples
    engine      `lanner bench engine`: put and drain throughput, then pickup latency
    pickup      its latency phases: put to a blocked pop, and on Redis the bare BLPOP floor
    children    the spawned child processes those phases run in
    pool        `lanner bench pool`: an App and a WorkerPool end to end
    pool_tasks  the tasks the pool and io benchmarks run
    io          `lanner bench io`: I/O-bound jobs, many at once per worker process
    web         `lanner bench web`: engine commands and time per dashboard page
    idle        `lanner bench idle`: CPU of an idle pool (and dashboard), then pickup latency
    transactional  `lanner bench transactional`: publishing within transactions, publisher killed
    flow        `lanner bench flow rate|keys|fair|cron`: flow control with real pools
    kestrel     `lanner bench kestrel`: the memcache front beside memcached in the same run
    kestrel_servers  the servers it starts (lanner serve, memcached), and their CPU from /proc
    depth       `lanner bench depth`: an engine with a deep backlog
    publish     `lanner bench publish`: single .delay() calls from many threads and processes
    chord       `lanner bench chord`: a chord of N no-op parents
    chord_chaos `lanner bench chord-chaos`: chords run by a pool whose workers are killed
    chord_tasks the tasks chord-chaos runs
    shards      `lanner bench shards`: Redis CPU per job of each shard of a Redis Cluster

Only public names of other lanner modules are used here.
"""
