-------------------------------------------------------------------------------
-- lanner.lua: lanner's additions to the qless protocol.
-------------------------------------------------------------------------------
-- Nothing here changes what a qless client sees: the additions are new keys
-- under ql:lanner:* and new commands named lanner.*.

-------------------------------------------------------------------------------
-- Wake-up list per queue
-------------------------------------------------------------------------------
-- ql:lanner:notify:<queue> is a list of tokens: one is pushed for each job
-- that becomes ready in the queue, so an idle worker can BLPOP the list
-- instead of polling pop. A token is only a hint; the worker still pops, and
-- may find nothing because another worker was quicker. Pop clears the list
-- whenever it cannot serve any more (queue empty, paused or at its
-- concurrency limit), so stale tokens do not wake workers in a loop.
-- Jobs that only become ready with time (scheduled, expired locks, recurring
-- runs) push a token when a command notices them; until then a blocked
-- worker uses lanner.next_due as its BLPOP timeout.

-- The list never holds more tokens than this: enough to wake every worker of
-- any sane deployment, and bounded when nobody listens.
local NOTIFY_CAP = 256

function Lanner.notify(queue, count)
  if count <= 0 then
    return
  end
  local key = Keys.notify(queue)
  local tokens = {}
  for index = 1, math.min(count, NOTIFY_CAP) do
    tokens[index] = '1'
  end
  local length = redis.call('rpush', key, unpack(tokens))
  if length > NOTIFY_CAP then
    redis.call('ltrim', key, -NOTIFY_CAP, -1)
  end
end

-- Drop the queue's tokens: there is nothing a woken worker could get now.
function Lanner.quiet(queue)
  redis.call('del', Keys.notify(queue))
end

-- A lock was given up (complete, fail, retry, cancel). In a queue with a
-- concurrency limit that may let a waiting job run, so wake a worker.
function Lanner.lock_released(queue)
  if Config.number(queue .. '-max-concurrency', 0) > 0
      and redis.call('zcard', Keys.queue(queue, 'work')) > 0 then
    Lanner.notify(queue, 1)
  end
end

-- Pop's last word on the tokens. `full` is true when the queue's concurrency
-- limit is now reached: tokens are useless until a lock is released (which
-- wakes a worker again). `left_over` counts expired jobs this pop could not
-- take: other workers may. With nothing left to give, stale tokens go.
function Lanner.after_pop(queue, full, left_over)
  if full then
    Lanner.quiet(queue)
  elseif left_over > 0 then
    Lanner.notify(queue, left_over)
  elseif redis.call('zcard', Keys.queue(queue, 'work')) == 0 then
    Lanner.quiet(queue)
  end
end

-------------------------------------------------------------------------------
-- Commands
-------------------------------------------------------------------------------
-- The lock is `worker`'s in `queue` (expired but not yet handed over counts).
local function holds(job, worker, queue)
  return job ~= nil and job.state == 'running' and job.worker == worker
    and job.queue == queue
end

-- lanner.complete_many: complete every listed job `worker` still holds in
-- `queue` (data unchanged, no next queue). Returns the jids completed; the
-- others (lock lost, already finished, unknown) are skipped, not errors.
function Lanner.complete_many(now, worker, queue, jids)
  local done = {}
  for _, jid in ipairs(jids) do
    if holds(Job.load(jid), worker, queue) then
      Job.complete(now, jid, worker, queue, nil, {})
      done[#done + 1] = jid
    end
  end
  return done
end

-- lanner.release: give back jobs `worker` popped from `queue` but will not run
-- (it is shutting down, or cannot finish before the lock runs out). Each is
-- waiting again where it was before the pop, without spending a retry, with a
-- `released` history entry. Returns the jids released; others are skipped.
function Lanner.release(now, worker, queue, jids)
  local released = {}
  for _, jid in ipairs(jids) do
    local job = Job.load(jid)
    if holds(job, worker, queue) then
      local key = Keys.job(jid)
      local ready = tonumber(redis.call('hget', key, 'ready')) or now
      redis.call('zrem', Keys.queue(queue, 'locks'), jid)
      Worker.release(worker, jid)
      redis.call('hmset', key, 'state', 'waiting', 'worker', '', 'expires', 0, 'time', ready)
      redis.call('hdel', key, 'grace')
      redis.call('zadd', Keys.queue(queue, 'work'), Queue.score(job.priority, ready), jid)
      Job.record(now, jid, 'released', { worker = worker })
      released[#released + 1] = jid
    end
  end
  Lanner.notify(queue, #released)
  return released
end

-- lanner.next_due: the earliest time at which something becomes ready in the
-- queue without anybody acting (a scheduled job, a lock running out or its
-- grace ending, a recurring run), or nil if nothing will. A worker waiting for
-- work blocks on the queue's token list until then at most.
function Lanner.next_due(queue)
  if redis.call('sismember', Keys.paused, queue) == 1 then
    return nil
  end
  local earliest
  for _, kind in ipairs({ 'scheduled', 'locks', 'recur' }) do
    local first = redis.call('zrange', Keys.queue(queue, kind), 0, 0, 'WITHSCORES')
    local at = tonumber(first[2])
    if at ~= nil and (earliest == nil or at < earliest) then
      earliest = at
    end
  end
  if earliest == nil then
    return nil
  end
  return Num.str(earliest)
end

-------------------------------------------------------------------------------
-- lanner.call: lanner's order among jobs that became ready at the same time
-------------------------------------------------------------------------------
-- qless scores a ready job `priority - ready_at / 1e10`, so jobs of equal
-- priority that became ready at the same time tie, and a sorted set orders
-- ties by jid (qless-core's tests pin that: they pop in reverse jid order).
-- lanner's contract orders them by put order instead: priority, then ready
-- time, then a sequence number given by put, retry, advance, unfail and
-- recurring spawns (kept by a release, a dependency release, a promotion and
-- a priority change), as the SQLite engine does.
--
-- `lanner.call <now> <command> <args...>` runs any command of this script
-- (qless's or lanner.*) in that order. Only while it runs (Order.active), the
-- few functions below that put a job into -work are wrapped so that the job
-- gets its place: a job's sequence number is the hash field lanner_seq (from
-- the counter ql:lanner:seq; 0 for jobs put by qless clients), and jobs with
-- the same base score (priority and ready time) form a run of adjacent
-- doubles just below that score, one step (an ulp, about 0.3 to 9 us of
-- ready time at priorities 0 to 7) apart, in sequence order. A qless client
-- reading -work still sees the same order, and qless commands (without
-- lanner.call) behave exactly as before. Jobs stalled by `timeout` all score
-- +inf and keep qless's order among themselves.

local Order = { active = false, keep_seq = false, tails = {} }

local SEQ_KEY = 'ql:lanner:seq'
local TINY = 2 ^ -1074

-- The largest double below x (x finite).
local function below(x)
  if x == 0 then
    return -TINY
  end
  local mantissa, exponent = math.frexp(x)
  local step = 2 ^ (exponent - 53)
  if mantissa == 0.5 then
    -- x is a power of two: doubles below it are twice as dense.
    step = step / 2
  end
  return x - math.max(step, TINY)
end

-- The base score (priority and ready time) and sequence number of a job.
local function base_of(jid)
  local values = redis.call('hmget', Keys.job(jid), 'priority', 'time', 'lanner_seq')
  local priority = tonumber(values[1]) or 0
  local ready = tonumber(values[2]) or 0
  return Queue.score(priority, ready), tonumber(values[3]) or 0
end

-- The member of `work` at descending rank `rank`: jid, score, base, seq.
local function at_rank(work, rank)
  local found = redis.call('zrevrange', work, rank, rank, 'WITHSCORES')
  if #found == 0 then
    return nil
  end
  local base, seq = base_of(found[1])
  return found[1], tonumber(found[2]), base, seq
end

-- Put `jid` (not in -work) into the queue's -work at base score `base`, after
-- the jobs of the same base with a smaller sequence number and before those
-- with a larger one.
function Order.place(queue, jid, base, seq)
  local work = Keys.queue(queue, 'work')
  local cache_key = work .. ' ' .. Num.str(base)
  local tail = Order.tails[cache_key]
  if tail ~= nil and tail.seq <= seq then
    -- The common case of a batch (put_many, promotions): after the last one.
    local score = below(tail.score)
    redis.call('zadd', work, score, jid)
    Order.tails[cache_key] = { score = score, seq = seq }
    return
  end
  -- The run of jobs with this base starts at the first member <= base.
  local top = redis.call('zcount', work, '(' .. Num.str(base), '+inf')
  local function in_run(offset)
    local member, _, member_base = at_rank(work, top + offset)
    return member ~= nil and member_base == base
  end
  if not in_run(0) then
    redis.call('zadd', work, base, jid)
    Order.tails[cache_key] = { score = base, seq = seq }
    return
  end
  -- Its length: exponential, then binary search. `last` is in the run.
  local last, beyond = 0, 1
  while in_run(beyond) do
    last, beyond = beyond, beyond * 2
  end
  while beyond - last > 1 do
    local middle = math.floor((last + beyond) / 2)
    if in_run(middle) then
      last = middle
    else
      beyond = middle
    end
  end
  local _, last_score, _, last_seq = at_rank(work, top + last)
  if last_seq <= seq then
    local score = below(last_score)
    redis.call('zadd', work, score, jid)
    Order.tails[cache_key] = { score = score, seq = seq }
    return
  end
  -- Somewhere inside the run: the first member with a larger sequence number.
  local low, high = -1, last
  while high - low > 1 do
    local middle = math.floor((low + high) / 2)
    local _, _, _, middle_seq = at_rank(work, top + middle)
    if middle_seq > seq then
      high = middle
    else
      low = middle
    end
  end
  local _, next_score = at_rank(work, top + high)
  local room = base
  if high > 0 then
    local _, previous_score = at_rank(work, top + high - 1)
    room = below(previous_score)
  elseif next_score == base then
    room = next_score
  end
  if room > next_score then
    -- A gap (left by jobs that were popped): no need to move anybody.
    redis.call('zadd', work, room, jid)
    return
  end
  -- Take that member's score and move it and the rest of the run down a step.
  local members = redis.call('zrevrange', work, top + high, top + last, 'WITHSCORES')
  local score = tonumber(members[2])
  redis.call('zadd', work, score, jid)
  for index = 1, #members - 2, 2 do
    redis.call('zadd', work, members[index + 3], members[index])
  end
  score = below(tonumber(members[#members]))
  redis.call('zadd', work, score, members[#members - 1])
  Order.tails[cache_key] = { score = score, seq = last_seq }
end

-- A job's sequence number: a new one, or (Order.keep_seq) the one it has.
local function sequence(jid)
  if Order.keep_seq then
    return tonumber(redis.call('hget', Keys.job(jid), 'lanner_seq')) or 0
  end
  local seq = redis.call('incr', SEQ_KEY)
  redis.call('hset', Keys.job(jid), 'lanner_seq', seq)
  return seq
end

-- Move a waiting job that is in -work to its place in lanner's order.
local function replace(queue, jid, base, seq)
  redis.call('zrem', Keys.queue(queue, 'work'), jid)
  Order.place(queue, jid, base, seq)
end

-- Queue.enqueue (put, requeue, advance, retry, unfail, recurring spawns and
-- dependency releases): a new sequence number, except for a release.
local qless_enqueue = Queue.enqueue
Queue.enqueue = function(now, queue, jid, priority, delay)
  local state = qless_enqueue(now, queue, jid, priority, delay)
  if Order.active then
    local seq = sequence(jid)
    if state == 'waiting' then
      replace(queue, jid, Queue.score(priority, now), seq)
    end
  end
  return state
end

local qless_release_if_ready = Job.release_if_ready
Job.release_if_ready = function(now, jid)
  local keep = Order.keep_seq
  Order.keep_seq = true
  qless_release_if_ready(now, jid)
  Order.keep_seq = keep
end

-- Due scheduled jobs become waiting, ready from their due time, in the order
-- of due time and sequence number.
local qless_promote_scheduled = Queue.promote_scheduled
Queue.promote_scheduled = function(now, queue)
  if not Order.active then
    return qless_promote_scheduled(now, queue)
  end
  local scheduled = Keys.queue(queue, 'scheduled')
  local due = redis.call('zrangebyscore', scheduled, '-inf', Num.str(now), 'WITHSCORES')
  if #due == 0 then
    return
  end
  local jobs = {}
  for index = 1, #due, 2 do
    local jid = due[index]
    local values = redis.call('hmget', Keys.job(jid), 'priority', 'lanner_seq')
    jobs[#jobs + 1] = {
      jid = jid, at = tonumber(due[index + 1]),
      priority = tonumber(values[1]) or 0, seq = tonumber(values[2]) or 0,
    }
  end
  table.sort(jobs, function(a, b)
    if a.at ~= b.at then
      return a.at < b.at
    end
    if a.seq ~= b.seq then
      return a.seq < b.seq
    end
    return a.jid < b.jid
  end)
  for _, job in ipairs(jobs) do
    redis.call('hmset', Keys.job(job.jid), 'state', 'waiting', 'time', job.at)
    Order.place(queue, job.jid, Queue.score(job.priority, job.at), job.seq)
  end
  redis.call('zremrangebyscore', scheduled, '-inf', Num.str(now))
  Lanner.notify(queue, #jobs)
end

-- A new priority keeps the job's ready time and sequence number.
local qless_set_priority = Job.set_priority
Job.set_priority = function(jid, priority)
  local result = qless_set_priority(jid, priority)
  if Order.active then
    local job = Job.load(jid)
    if job.state == 'waiting' and redis.call('zscore', Keys.queue(job.queue, 'work'), jid) then
      local seq = tonumber(redis.call('hget', Keys.job(jid), 'lanner_seq')) or 0
      replace(job.queue, jid, Queue.score(priority, job.time or 0), seq)
    end
  end
  return result
end

-------------------------------------------------------------------------------
-- Commands lanner's Python engine needs where qless's reply or behaviour
-- differs from lanner's contract (docs/protocol.md). The qless commands
-- themselves are left exactly as qless clients expect them.
-------------------------------------------------------------------------------

-- lanner.release_in: give back jobs `worker` holds in `queue` without
-- spending a retry (history `released` {worker}), like lanner.release, but
-- with a delay: with delay <= 0 each is waiting again in its exact place
-- from before the pop (ready time and sequence number), otherwise scheduled
-- `delay` seconds ahead. Returns the jids released; others are skipped.
function Lanner.release_in(now, worker, queue, delay, jids)
  local released = {}
  local ready = 0
  for _, jid in ipairs(jids) do
    local job = Job.load(jid)
    if holds(job, worker, queue) then
      local key = Keys.job(jid)
      redis.call('zrem', Keys.queue(queue, 'locks'), jid)
      Worker.release(worker, jid)
      redis.call('hdel', key, 'grace')
      if delay > 0 then
        local due = now + delay
        redis.call('hmset', key, 'state', 'scheduled', 'worker', '', 'expires', 0, 'time', due)
        redis.call('zadd', Keys.queue(queue, 'scheduled'), due, jid)
      else
        local at = tonumber(redis.call('hget', key, 'ready')) or now
        redis.call('hmset', key, 'state', 'waiting', 'worker', '', 'expires', 0, 'time', at)
        local seq = tonumber(redis.call('hget', key, 'lanner_seq')) or 0
        Order.place(queue, jid, Queue.score(job.priority, at), seq)
        ready = ready + 1
      end
      Job.record(now, jid, 'released', { worker = worker })
      released[#released + 1] = jid
    end
  end
  Lanner.notify(queue, ready)
  if #released > ready then
    -- A freed slot under max-concurrency may let a waiting job run.
    Lanner.lock_released(queue)
  end
  return released
end

-- lanner.peek: the jobs pop would give next, in pop order, without changing
-- anything (qless's peek spawns recurring runs and promotes scheduled jobs):
-- expired locks by expiry, then jobs stalled by timeout, then ready jobs and
-- due scheduled jobs together in lanner's order (a due job ranks as if
-- promoted at its due time). Ignores pause and max-concurrency, like peek.
-- Returns jids.
function Lanner.peek(now, queue, count)
  local jids = {}
  if count <= 0 then
    return jids
  end
  local at = Num.str(now)
  for _, jid in ipairs(redis.call('zrangebyscore', Keys.queue(queue, 'locks'), '-inf', at,
      'LIMIT', 0, count)) do
    jids[#jids + 1] = jid
  end
  local want = count - #jids
  if want <= 0 then
    return jids
  end
  local candidates = {}
  local work = redis.call('zrevrange', Keys.queue(queue, 'work'), 0, want - 1, 'WITHSCORES')
  for index = 1, #work, 2 do
    local jid, score = work[index], tonumber(work[index + 1])
    local base, seq = base_of(jid)
    if score == math.huge then
      base = score
    end
    candidates[#candidates + 1] = { jid = jid, base = base, seq = seq, rank = index }
  end
  local due = redis.call('zrangebyscore', Keys.queue(queue, 'scheduled'), '-inf', at,
    'WITHSCORES')
  for index = 1, #due, 2 do
    local jid = due[index]
    local values = redis.call('hmget', Keys.job(jid), 'priority', 'lanner_seq')
    candidates[#candidates + 1] = {
      jid = jid, seq = tonumber(values[2]) or 0, rank = #work + index,
      base = Queue.score(tonumber(values[1]) or 0, tonumber(due[index + 1])),
    }
  end
  table.sort(candidates, function(a, b)
    if a.base ~= b.base then
      return a.base > b.base
    end
    if a.seq ~= b.seq then
      return a.seq < b.seq
    end
    return a.rank < b.rank
  end)
  for index = 1, math.min(want, #candidates) do
    jids[#jids + 1] = candidates[index].jid
  end
  return jids
end

-- lanner.cancel: qless's cancel, replying with the jids actually cancelled
-- (jobs that exist and are not complete) instead of the jids as given.
function Lanner.cancel(now, jids)
  local cancelled = {}
  for _, jid in ipairs(jids) do
    local state = present(redis.call('hget', Keys.job(jid), 'state'))
    if state ~= nil and state ~= 'complete' then
      cancelled[#cancelled + 1] = jid
    end
  end
  Job.cancel(now, jids)
  return cancelled
end
