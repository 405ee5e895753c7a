"""The Redis engine on Redis Cluster (`redis+cluster://`, `rediss+cluster://`).

Each queue is a partition: the same Lua core runs with every key of the call under the
queue's hash tag, `ql:{q:<queue>}:...` (a fanout child `p+c` under its parent's, `{q:p}`),
so a queue's jobs, locks, workers and counters sit in one hash slot and each command about
one queue is one atomic call on one shard. `address` parses URLs and makes the client,
`caller` loads and calls the core, `partitions` names partitions and finds a job's,
`gather` merges what the partitions answer, `transfer` moves a job between partitions,
`flow` keeps each flow control's key or bucket with one partition (and merges their flow
state), and `engine` maps the contract onto them.
"""
