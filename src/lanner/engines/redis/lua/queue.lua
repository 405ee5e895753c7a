-------------------------------------------------------------------------------
-- queue.lua: putting jobs in, handing them out, and looking at a queue.
-------------------------------------------------------------------------------
-- A queue is five zsets (see the header): -work (ready jobs, by score),
-- -scheduled (by due time), -locks (running jobs, by lock expiry), -depends
-- (by put time) and -recur (templates, by next run). Nothing moves on its own:
-- due scheduled jobs, due recurring runs and expired locks are dealt with by
-- the commands that look at the queue (pop, peek, queues, jobs).

-- qless's score for a waiting job (see SCORE_TIME_SCALE).
function Queue.score(priority, ready_at)
  return priority - ready_at / SCORE_TIME_SCALE
end

-- ql:queues lists every queue ever used, scored by when it was first seen.
-- Queues already known in this call are not looked up again (queue.forget
-- drops them from this memo).
local remembered
per_call(function()
  remembered = {}
end)

function Queue.remember(now, queue)
  if remembered[queue] then
    return
  end
  if not redis.call('zscore', Keys.queues, queue) then
    redis.call('zadd', Keys.queues, now, queue)
  end
  remembered[queue] = true
end

-------------------------------------------------------------------------------
-- The order of waiting jobs
-------------------------------------------------------------------------------
-- Waiting jobs pop by priority (higher first), then by the time they became
-- ready, then in insertion order: a sequence number (hash field lanner_seq,
-- from the counter ql:lanner:seq) that put, retry, advance, unfail and
-- recurring spawns give. A dependency release, a promotion, a release and a
-- priority change keep it. Jobs stored without one (by an older script) count
-- as 0. This is the SQLite engine's order, for every caller of the script.
--
-- qless's score alone ties jobs ready at the same time (a sorted set then
-- orders them by jid), and no fixed formula of (priority, ready, seq) fits in
-- one double: at priority 7 and today's Unix times a double has about 112
-- steps per millisecond of ready time, while the sequence number grows without
-- bound. So -work holds the order by placement: a job goes in at its rank,
-- found by binary search over -work comparing (priority, ready, seq) read from
-- the job hashes, with a score strictly between the scores of its neighbours:
-- qless's score when that fits (the usual case), else the next double below
-- the job ahead. Jobs that tie on qless's score thus sit on adjacent doubles
-- just below it; when a job must go between two adjacent doubles, the jobs
-- behind it move down one double each, up to the first gap. The order is
-- exact at any precision; a score may sit below qless's score by as many
-- doubles as jobs share (or crowd) that time, which no reader sees: every
-- reader (pop, peek, jobs) takes -work highest score first, as qless does.

-- A job's place in the order: { priority, ready time, sequence number }.
function Queue.order(jid)
  local values = redis.call('hmget', Keys.job(jid), 'priority', 'time', 'lanner_seq')
  return { tonumber(values[1]) or 0, tonumber(values[2]) or 0, tonumber(values[3]) or 0 }
end

-- Whether order `a` pops before order `b`.
function Queue.ahead(a, b)
  if a[1] ~= b[1] then
    return a[1] > b[1]
  elseif a[2] ~= b[2] then
    return a[2] < b[2]
  end
  return a[3] < b[3]
end

-- Orders known without reading the job hash, or nil. Only lanner.put_many
-- sets it (see Queue.put_many): there each job placed in -work is remembered
-- here, so the next job, which mostly goes right behind it, does not read it
-- back. Within put_many nothing else changes a job's priority, ready time or
-- sequence number, and Queue.put forgets the job it moves.
local known_orders

-- Also within put_many: queue -> { jid, score } of the last job in -work, when
-- put_many placed it there (nothing else in put_many adds to -work, and
-- Job.unplace forgets the queue's entry when it takes a job out).
local known_tails

-- Also within put_many: jids known to have no job yet (one EXISTS over the
-- batch said so), whose put need not look first.
local fresh_jids

-- ZADDs to -work of jobs placed behind the last one, deferred to one ZADD per
-- queue (queue -> {score, jid, ...}). They are made before anything reads
-- or changes that -work (Queue.place, Job.unplace) and when the command ends
-- (Queue.flush), and ZADD takes pairs in order: the set ends up as with one
-- ZADD per job.
local deferred_work
per_call(function()
  known_orders, known_tails, fresh_jids, deferred_work = nil, nil, nil, {}
end)

local function flush_work(queue)
  local deferred = deferred_work[queue]
  if deferred ~= nil then
    deferred_work[queue] = nil
    call_spread('zadd', Keys.queue(queue, 'work'), deferred, 1000)
  end
end

function Queue.flush()
  for queue in pairs(deferred_work) do
    flush_work(queue)
  end
end

-- A job is about to leave the queue's -work.
function Queue.forget_tail(queue)
  flush_work(queue)
  if known_tails then
    known_tails[queue] = nil
  end
end

local function order_of(jid)
  local order = known_orders and known_orders[jid]
  if order ~= nil then
    return order
  end
  return Queue.order(jid)
end

-- Sequence numbers reserved in one INCRBY (by put_many, which knows how many
-- its puts take), handed out before falling back to INCR.
local seq_pool = {}
per_call(function()
  seq_pool.next, seq_pool.last = 0, -1
end)

function Queue.reserve_seqs(count)
  if count > 0 then
    local last = redis.call('incrby', Keys.seq, count)
    seq_pool.next, seq_pool.last = last - count + 1, last
  end
end

-- A new sequence number: the job goes to the back of the line of jobs ready
-- at the same time.
function Queue.next_seq()
  if seq_pool.next <= seq_pool.last then
    local seq = seq_pool.next
    seq_pool.next = seq + 1
    return seq
  end
  return redis.call('incr', Keys.seq)
end

function Queue.take_seq(jid)
  redis.call('hset', Keys.job(jid), 'lanner_seq', Queue.next_seq())
end

local TINY = 2 ^ -1074

-- The largest double below x (x finite).
local function below(x)
  if x == 0 then
    return -TINY
  end
  local mantissa, exponent = math.frexp(x)
  local step = 2 ^ (exponent - 53)
  if mantissa == 0.5 then
    -- x is a power of two: the doubles just below it are twice as dense.
    step = step / 2
  end
  return x - math.max(step, TINY)
end

-- Move the jobs from `rank` on that score `score` or more down, each to the
-- double below the one before it, until one is already lower. All are read
-- before any moves: a moved job may tie with the next one for a moment, and
-- a sorted set orders ties by jid, which would shuffle the ranks still to read.
local function make_room(work, rank, score)
  local moving, done = {}, false
  while not done do
    local behind = redis.call('zrevrange', work, rank, rank + 31, 'WITHSCORES')
    done = #behind < 64
    for index = 1, #behind, 2 do
      if tonumber(behind[index + 1]) < score then
        done = true
        break
      end
      score = below(score)
      moving[#moving + 1] = { behind[index], score }
    end
    rank = rank + 32
  end
  for _, job in ipairs(moving) do
    redis.call('zadd', work, job[2], job[1])
  end
end

-- Put a waiting job (hash up to date, not in -work) into the queue's -work at
-- its place in the order. Jobs stalled by `timeout` (score +inf) stay ahead.
-- `mine` is the job's order when the caller knows it (else it is read).
-- Add `jid` to -work at `score`; `at_back`: behind every job there.
local function put_at(queue, jid, mine, score, at_back)
  if known_orders == nil then
    redis.call('zadd', Keys.queue(queue, 'work'), score, jid)
    return
  end
  known_orders[jid] = mine
  -- A job placed behind all others is the new last job.
  if at_back then
    known_tails[queue] = { jid, score }
    local deferred = deferred_work[queue] or {}
    deferred[#deferred + 1], deferred[#deferred + 2] = score, jid
    deferred_work[queue] = deferred
  else
    known_tails[queue] = nil
    redis.call('zadd', Keys.queue(queue, 'work'), score, jid)
  end
end

function Queue.place(queue, jid, mine)
  mine = mine or Queue.order(jid)
  local score = Queue.score(mine[1], mine[2])
  -- The last job first, as a new job mostly goes behind all others. (The last
  -- rank holds the lowest score, lowest jid among ties: what ZRANGE 0 0 gives.)
  local work = Keys.queue(queue, 'work')
  local last = known_tails and known_tails[queue]
  if last == nil then
    flush_work(queue)
    last = redis.call('zrange', work, 0, 0, 'WITHSCORES')
  end
  if #last == 0 then
    return put_at(queue, jid, mine, score, true)
  end
  local last_job, last_score = last[1], tonumber(last[2])
  if last_score == math.huge or Queue.ahead(order_of(last_job), mine) then
    if last_score <= score then
      score = below(last_score)
    end
    return put_at(queue, jid, mine, score, true)
  end
  flush_work(queue)
  local members = {}
  local function member(rank)
    local known = members[rank]
    if known == nil then
      local found = redis.call('zrevrange', work, rank, rank, 'WITHSCORES')
      known = { found[1], tonumber(found[2]) }
      members[rank] = known
    end
    return known[1], known[2]
  end
  local function goes_ahead(rank)
    local other, other_score = member(rank)
    return other_score == math.huge or Queue.ahead(order_of(other), mine)
  end
  -- The first rank whose job does not go ahead of this one.
  local size = redis.call('zcard', work)
  members[size - 1] = { last_job, last_score }
  local low, high = 0, size
  while low < high do
    local middle = math.floor((low + high) / 2)
    if goes_ahead(middle) then
      low = middle + 1
    else
      high = middle
    end
  end
  if low > 0 then
    local _, ahead = member(low - 1)
    if ahead <= score then
      score = below(ahead)
    end
  end
  make_room(work, low, score)
  put_at(queue, jid, mine, score, false)
end

-------------------------------------------------------------------------------
-- Putting jobs in
-------------------------------------------------------------------------------
-- Place a job whose hash is otherwise up to date into `queue`: depends if it
-- still waits on another job, else scheduled if delayed, else waiting.
-- Writes state and time (when it became ready) and returns the state. The job
-- takes a new sequence number unless `keep_seq` (a dependency release).
-- `put` (from Queue.put) carries the hash fields the put writes, stored in the
-- same HMSET, the job's priority, and whether it is known to wait for nothing
-- (`independent`); the put has already cleared `scheduled`.
function Queue.enqueue(now, queue, jid, delay, keep_seq, put)
  local key = Keys.job(jid)
  local fields = put and put.fields or {}
  local seq
  if not keep_seq then
    seq = Queue.next_seq()
  end
  local state, scheduled
  local independent = put ~= nil and put.independent
  if not independent and redis.call('scard', Keys.dependencies(jid)) > 0 then
    state = 'depends'
    redis.call('zadd', Keys.queue(queue, 'depends'), now, jid)
    if delay > 0 then
      -- Remembered so the delay still applies once the dependencies are met.
      scheduled = now + delay
    end
  elseif delay > 0 then
    state = 'scheduled'
    redis.call('zadd', Keys.queue(queue, 'scheduled'), now + delay, jid)
  else
    state = 'waiting'
  end
  if scheduled == nil and put == nil then
    redis.call('hdel', key, 'scheduled')
  end
  local size = #fields
  fields[size + 1], fields[size + 2] = 'state', state
  fields[size + 3], fields[size + 4] = 'time', now
  if seq ~= nil then
    fields[#fields + 1], fields[#fields + 2] = 'lanner_seq', seq
  end
  if scheduled ~= nil then
    fields[#fields + 1], fields[#fields + 2] = 'scheduled', scheduled
  end
  redis.call('hmset', key, unpack(fields))
  if state == 'waiting' then
    local mine
    if put ~= nil and seq ~= nil then
      mine = { put.priority, now, seq }
    end
    Queue.place(queue, jid, mine)
    Lanner.notify(queue, 1)
  end
  Queue.remember(now, queue)
  return state
end

-- Create a job, or move an existing one (from whatever queue and state it is
-- in). options: priority, tags (list), retries, depends (list), and lanner's
-- if_exists and expires_at; on a move an option left out keeps the job's old
-- value (but expires_at: none), and depends replaces the old dependencies
-- only when given. `worker` is who asks: if the job was running for somebody
-- else, that worker is told it lost the lock. `spawned_from` is the recurring
-- template of a spawned job. Returns the jid, and true if if_exists kept a
-- live job as it was. (LIMITS' bounds and FANOUT's copies are the caller's:
-- Limits.put; the queue's max-age applies here, to spawned runs too.)
local PUT_PROBE = { 'state', 'grace', 'scheduled', 'lanner_expires_at' }

-- What lanner's `if_exists` put option finds live (LIVE): `keep` keeps such
-- a job as it is (put stores nothing), `move-unless-running` refuses to move
-- a running one. Without the option (or with `move`), put moves, as qless does.

function Queue.kept_or_refused(jid, if_exists)
  if if_exists == nil or if_exists == 'move' or (fresh_jids and fresh_jids[jid]) then
    return false
  end
  local state = present(redis.call('hget', Keys.job(jid), 'state'))
  if if_exists == 'keep' then
    return LIVE[state] == true
  end
  if if_exists == 'once' then
    return state ~= nil
  end
  if if_exists == 'keep-waiting'
      and (state == 'waiting' or state == 'scheduled' or state == 'depends') then
    return true
  end
  if state == 'running' or state == 'stalled' then
    raise('Job %s is running: it is not moved (if_exists %s)', jid, if_exists)
  end
  return false
end

function Queue.put(now, worker, queue, jid, klass, data, delay, options, spawned_from)
  if Queue.kept_or_refused(jid, options.if_exists) then
    return jid, true
  end
  -- Mostly the job is new: a look at a few fields tells, before loading all.
  -- Only fields the hash has need deleting (grace, scheduled, an expiry).
  local old, grace, scheduled, expiry
  if fresh_jids and fresh_jids[jid] then
    fresh_jids[jid] = nil -- a second put of it in the batch finds the first
  else
    local probe, raw = Job.load(jid, PUT_PROBE)
    if probe == nil then
      grace, scheduled, expiry = present(raw[2]), present(raw[3]), present(raw[4])
    else
      old, raw = Job.load(jid, Job.EXPIRY_FIELDS)
      grace, scheduled, expiry = present(raw[15]), present(raw[16]), present(raw[18])
    end
  end
  local priority, retries, tags = options.priority, options.retries, options.tags
  if known_orders then
    known_orders[jid] = nil
  end

  if old ~= nil then
    redis.call('hdel', Keys.job(jid), 'result')
    Job.unplace(now, old)
    if old.state == 'running' then
      Lanner.lock_released(old.queue)
    end
    if priority == nil then priority = old.priority end
    if retries == nil then retries = old.retries end
    if tags == nil then
      tags = Json.decode(old.tags, {})
    else
      Job.unindex_tags(jid, Json.decode(old.tags, {}))
      Job.index_tags(now, jid, tags)
    end
    if options.depends ~= nil then
      Job.drop_dependencies(jid, redis.call('smembers', Keys.dependencies(jid)))
    end
  else
    tags = tags or {}
    Job.index_tags(now, jid, tags)
  end
  priority = priority or 0
  retries = retries or 5
  Job.add_dependencies(jid, options.depends or {})

  local key = Keys.job(jid)
  -- The queue counts the data's bytes (Lua's # counts bytes) until the job
  -- leaves it, which gives back exactly this (lanner_size).
  local size = #data
  Limits.entered(queue, size)
  -- lanner_size right after jid: a new hash keeps its fields in this order,
  -- and HMGET finds those at the front soonest.
  local fields = {
    'jid', jid, 'lanner_size', size, 'klass', klass, 'data', data, 'priority', priority,
    'tags', Json.array(tags), 'queue', queue, 'worker', '', 'expires', 0,
    'retries', retries, 'remaining', retries,
  }
  if spawned_from ~= nil then
    fields[#fields + 1], fields[#fields + 2] = 'spawned_from_jid', spawned_from
  end
  if options.flow ~= nil then
    fields[#fields + 1], fields[#fields + 2] = 'lanner_flow', options.flow
    Flow.mark(queue, options.flow)
  elseif old ~= nil then
    redis.call('hdel', key, 'lanner_flow')
  end
  local expires_at = Limits.expiry(now, queue, options.expires_at)
  if expires_at ~= nil then
    fields[#fields + 1], fields[#fields + 2] = 'lanner_expires_at', Num.str(expires_at)
    expiry = nil
  end
  if grace ~= nil or scheduled ~= nil or expiry ~= nil then
    local stale = {}
    for field, value in pairs({ grace = grace, scheduled = scheduled,
        lanner_expires_at = expiry }) do
      if value ~= nil then
        stale[#stale + 1] = field
      end
    end
    redis.call('hdel', key, unpack(stale))
  end
  Job.record(now, jid, 'put', { q = queue })
  -- A new job given no dependencies has none (a job's sets go with its hash).
  local independent = old == nil and (options.depends == nil or #options.depends == 0)
  local state = Queue.enqueue(now, queue, jid, delay, false,
    { fields = fields, priority = priority, independent = independent })
  if state == 'waiting' and options.flow ~= nil and string.find(options.flow, '"f":', 1, true) then
    flush_work(queue) -- FLOW's fairness may take it out of -work again
    if known_tails then
      known_tails[queue] = nil
    end
    Flow.entered(now, queue, jid, cjson.decode(options.flow).f)
  end

  Events.put(jid, queue)
  Events.tracked(jid, 'put')
  if old ~= nil and old.state == 'running' and old.worker ~= worker then
    Events.lock_lost(jid, old.worker)
  end
  return jid
end

-- Many puts in one call (lanner.put_many): each takes one sequence number, so
-- they are reserved at once; each job's order is remembered for placing the
-- next; and when none of the jobs exists yet (the usual case), one EXISTS
-- tells, instead of a look per put. `put(now, p)` does one put of the list.
function Queue.put_many(now, puts, put)
  local keys = {}
  for index, p in ipairs(puts) do
    keys[index] = Keys.job(p.jid)
  end
  local existing = 0
  for first = 1, #keys, 1000 do
    existing = existing + redis.call('exists', unpack(keys, first, math.min(first + 999, #keys)))
  end
  if existing == 0 then
    fresh_jids = {}
    for _, p in ipairs(puts) do
      fresh_jids[p.jid] = true
    end
  end
  Queue.reserve_seqs(#puts)
  known_orders, known_tails = {}, {}
  local results = {}
  for index, p in ipairs(puts) do
    results[index] = put(now, p)
  end
  Queue.flush()
  known_orders, known_tails, fresh_jids = nil, nil, nil
  return results
end

-------------------------------------------------------------------------------
-- Things that become due
-------------------------------------------------------------------------------
-- Scheduled jobs whose time has come become waiting. They count as ready from
-- their due time, not from now, so their order does not depend on when
-- somebody happened to look. They are placed in order, so each lands behind
-- the one before (no job has to move to make room for another).
function Queue.promote_scheduled(now, queue)
  local scheduled = Keys.queue(queue, 'scheduled')
  local due = redis.call('zrangebyscore', scheduled, '-inf', now, 'WITHSCORES')
  if #due == 0 then
    return
  end
  local jobs = {}
  for index = 1, #due, 2 do
    local jid = due[index]
    redis.call('hmset', Keys.job(jid), 'state', 'waiting', 'time', due[index + 1])
    jobs[#jobs + 1] = { jid = jid, order = Queue.order(jid) }
  end
  table.sort(jobs, function(a, b) return Queue.ahead(a.order, b.order) end)
  for _, job in ipairs(jobs) do
    Queue.place(queue, job.jid)
  end
  redis.call('zremrangebyscore', scheduled, '-inf', now)
  Lanner.notify(queue, #jobs)
end

-- Everything time-driven a reader of the queue should see first.
function Queue.catch_up(now, queue)
  Recurring.spawn_due(now, queue)
  Queue.promote_scheduled(now, queue)
end

-------------------------------------------------------------------------------
-- Handing jobs out
-------------------------------------------------------------------------------
-- Give one job to `worker`. `from_work` is true for a job taken from the
-- waiting jobs (its wait time is recorded), false for one taken over from an
-- expired lock.
-- `batch` (pop's jobs from -work): the -work, -locks and worker zset updates
-- are collected there and made by flush_locks, one command per key.
local function lock(now, queue, worker, job, from_work, batch, start)
  local jid = job.jid
  local expires = now + Config.heartbeat(queue)
  local fields = { 'state', 'running', 'worker', worker, 'expires', expires, 'time', now,
    'remaining', job.remaining }
  if from_work then
    if batch then
      batch.work[#batch.work + 1] = jid
    else
      redis.call('zrem', Keys.queue(queue, 'work'), jid)
    end
    if job.time ~= nil then
      Stats.record('wait', queue, now, now - job.time)
      -- Kept so lanner.release can put the job back in its old place.
      fields[#fields + 1], fields[#fields + 2] = 'ready', job.time
    end
  else
    Worker.release(job.worker, jid)
  end
  if batch then
    local locks = batch.locks
    locks[#locks + 1], locks[#locks + 2] = expires, jid
  else
    redis.call('zadd', Keys.queue(queue, 'locks'), expires, jid)
    Worker.hold(worker, jid, expires)
  end
  redis.call('hmset', Keys.job(jid), unpack(fields))
  if job.grace ~= nil then
    redis.call('hdel', Keys.job(jid), 'grace')
  end
  local entry = { worker = worker }
  if start then
    entry.start, entry.by = start.start, start.by
  end
  Job.record(now, jid, 'popped', entry)
  Events.tracked(jid, 'popped')
  -- The job as it now stands, for the reply (see objects).
  job.state, job.worker, job.expires, job.time, job.grace = 'running', worker, expires, now, nil
end

-- Make the updates lock collected in `batch`: the same members and scores
-- as one ZREM / ZADD per job (ZADD takes pairs in order, so a jid given twice
-- ends with its last score, as with separate calls).
local function flush_locks(queue, worker, batch)
  call_spread('zrem', Keys.queue(queue, 'work'), batch.work, 1000)
  call_spread('zadd', Keys.queue(queue, 'locks'), batch.locks, 1000)
  call_spread('zadd', Keys.worker_jobs(worker), batch.locks, 1000)
end

-- The lock has run out: tell its worker, note it in the history, count a
-- retry for the day.
local function notice_expiry(now, queue, job)
  Events.tracked(job.jid, 'stalled')
  Job.record(now, job.jid, 'timed-out')
  Events.lock_lost(job.jid, job.worker)
  Stats.count(queue, now, 'retries', 1, now)
end

-- At most this many expired locks are looked at per pop, so that a crowd of
-- dead workers cannot make one call long; the rest wait for later pops.
local RECLAIM_BATCH = 1000

-- Deal with the queue's expired locks, taking over at most `limit` of them for
-- `worker` (their jids are appended to `out`).
--   * A lock seen expired for the first time gets a grace period: its worker is
--     told, and the lock is extended by grace-period seconds during which the
--     worker may still complete, fail or heartbeat the job.
--   * A lock expired again after its grace (or at once if grace-period <= 0)
--     spends one retry: with none left the job fails into
--     failed-retries-<queue>, otherwise it goes to the new worker.
-- Returns how many expired jobs were ready to be taken over but did not fit.
local function reclaim_expired(now, queue, worker, limit, out)
  local locks = Keys.queue(queue, 'locks')
  local expired = redis.call('zrangebyscore', locks, '-inf', now,
    'LIMIT', 0, math.max(limit, RECLAIM_BATCH))
  local grace_period = Config.number('grace-period', 10)
  local left_over = 0
  for _, jid in ipairs(expired) do
    local job = Job.load(jid)
    if job == nil or job.state ~= 'running' then
      -- A lock left behind without a running job: nothing to take over.
      redis.call('zrem', locks, jid)
    elseif grace_period > 0 and job.grace ~= '1' then
      notice_expiry(now, queue, job)
      local expires = now + grace_period
      redis.call('hmset', Keys.job(jid), 'grace', '1', 'expires', expires)
      redis.call('zadd', locks, expires, jid)
      Worker.hold(job.worker, jid, expires)
    elseif #out < limit then
      if grace_period <= 0 then
        notice_expiry(now, queue, job)
      end
      job.remaining = (job.remaining or 0) - 1
      if job.remaining < 0 then
        local group = 'failed-retries-' .. queue
        local message = string.format('Job exhausted retries in queue "%s"', queue)
        redis.call('hset', Keys.job(jid), 'remaining', job.remaining)
        Job.mark_failed(now, job, group, message, job.worker, nil)
        Events.failed(jid, job.worker, group, message)
        Events.tracked(jid, 'failed')
      else
        lock(now, queue, worker, job, false)
        out[#out + 1] = jid
      end
    else
      left_over = left_over + 1
    end
  end
  return left_over
end

-- How many more jobs the queue may run under <queue>-max-concurrency, or nil
-- without a limit. Only live locks count: a job whose lock ran out is not
-- really running any more.
local function room(now, queue)
  local limit = Config.number(queue .. '-max-concurrency', 0)
  if limit <= 0 then
    return nil
  end
  local running = redis.call('zcount', Keys.queue(queue, 'locks'), '(' .. Num.str(now), '+inf')
  return math.max(0, limit - running)
end

-- `locked` maps a jid to its job table as lock left it, when the caller has
-- it: the hash need not be read back.
local function objects(jids, locked)
  local result = {}
  for _, jid in ipairs(jids) do
    local job = locked and locked[jid]
    if job ~= nil then
      result[#result + 1] = Job.object(job)
    else
      result[#result + 1] = Job.get(jid)
    end
  end
  return result
end

-- At most this many waiting jobs past their expires_at are dropped per pop
-- (LIMITS), so that a backlog of them cannot make one call long; a pop that
-- stops there leaves a wake-up token, so a worker comes back for the rest.
local EXPIRE_BATCH = 1000

-- Whether a job read from -work is a waiting job whose time is up (LIMITS).
-- A stalled job (its lock ran out, or `timeout`) is not: it was handed out.
local function past_expiry(job, now)
  local expires_at = job.lanner_expires_at
  return expires_at ~= nil and expires_at <= now and job.state == 'waiting'
end

-- Lock up to `count` jobs for `worker`: expired locks first, then waiting jobs
-- by score, dropping those past their expiry. Returns their objects.
function Queue.pop(now, queue, worker, count)
  Worker.seen(now, worker)
  Limits.register(queue)
  if redis.call('sismember', Keys.paused, queue) == 1 then
    Lanner.quiet(queue)
    return {}
  end
  local free = room(now, queue)
  local limit = math.min(count, free or count)
  local taken = {}
  local left_over = reclaim_expired(now, queue, worker, limit, taken)
  Queue.catch_up(now, queue)

  -- Jobs taken from -work, as lock left them: nothing changes them afterwards
  -- in this call, so the reply is built without reading them back.
  local locked = {}
  local batch = { work = {}, locks = {} }
  local dropped, capped, held = 0, false, 0
  local flows = #taken < limit and Flow.active(queue)
  if flows then
    Flow.unpark(now, queue)
  end
  if #taken < limit then
    -- Reads -work from its front, in rounds: each locks what it can, then
    -- drops what had expired (which may release jobs that depended on it),
    -- and the next reads the front again, until `count` is filled.
    local work = Keys.queue(queue, 'work')
    while #taken < limit do
      local want = limit - #taken
      local jids = redis.call('zrevrange', work, 0, want - 1)
      local expired, dangling, held_now, placed = {}, {}, 0, Flow.placed
      local alone = false
      for _, jid in ipairs(jids) do
        local job = Job.load(jid, Job.POP_FIELDS)
        local admitted = 'yes'
        if job == nil then
          dangling[#dangling + 1] = jid
        elseif past_expiry(job, now) then
          expired[#expired + 1] = jid
        else
          if flows then
            admitted = Flow.admit(now, queue, jid, #taken == 0)
          end
          if admitted == 'later' then
            alone = true -- a rate-limited job is popped alone: by the next pop
            break
          elseif admitted == 'held' then
            held_now = held_now + 1
          else
            local start = nil
            if admitted == 'rated' then
              start, Flow.start = Flow.start, nil
            end
            lock(now, queue, worker, job, true, batch, start)
            taken[#taken + 1] = jid
            locked[jid] = job
            if admitted == 'rated' then
              alone = true -- it starts at once, behind no other job of its batch
              break
            end
          end
        end
      end
      flush_locks(queue, worker, batch)
      batch.work, batch.locks = {}, {}
      call_spread('zrem', work, dangling, 1000)
      for _, jid in ipairs(expired) do
        Limits.drop(now, Job.load(jid), 'expired')
      end
      dropped = dropped + #expired
      held = held + held_now
      capped = dropped >= EXPIRE_BATCH or held >= Flow.HELD_CAP
      if capped or alone or (#jids < want and #expired == 0 and held_now == 0
          and placed == Flow.placed) then
        break
      end
    end
  end
  Lanner.after_pop(queue, free ~= nil and #taken >= free, left_over)
  if capped then
    Lanner.notify(queue, 1)
  end
  return objects(taken, locked)
end

-- The jobs pop would hand out next, without locking them. Like pop it spawns
-- due recurring jobs and promotes due scheduled ones; unlike pop it ignores
-- pause and max-concurrency, and leaves expired locks alone.
function Queue.peek(now, queue, count)
  Limits.register(queue)
  Queue.catch_up(now, queue)
  local jids = {}
  if count > 0 then
    jids = redis.call('zrangebyscore', Keys.queue(queue, 'locks'), '-inf', now,
      'LIMIT', 0, count)
  end
  if #jids < count then
    for _, jid in ipairs(redis.call('zrevrange', Keys.queue(queue, 'work'), 0,
        count - #jids - 1)) do
      jids[#jids + 1] = jid
    end
  end
  return objects(jids)
end

-------------------------------------------------------------------------------
-- Looking at queues
-------------------------------------------------------------------------------
-- Counts for one queue. `stalled` is running jobs whose lock has run out plus
-- jobs stalled by `timeout` (which wait at score +inf in -work).
function Queue.counts(now, queue)
  Queue.promote_scheduled(now, queue)
  local work, locks = Keys.queue(queue, 'work'), Keys.queue(queue, 'locks')
  local expired = redis.call('zcount', locks, '-inf', now)
  local timed_out = redis.call('zcount', work, '+inf', '+inf')
  return {
    name = queue,
    waiting = redis.call('zcard', work) - timed_out,
    stalled = expired + timed_out,
    running = redis.call('zcard', locks) - expired,
    scheduled = redis.call('zcard', Keys.queue(queue, 'scheduled')),
    depends = redis.call('zcard', Keys.queue(queue, 'depends')),
    recurring = redis.call('zcard', Keys.queue(queue, 'recur')),
    paused = redis.call('sismember', Keys.paused, queue) == 1,
  }
end

-- Counts for every known queue, in the order they were first seen.
function Queue.all_counts(now)
  local result = {}
  for _, queue in ipairs(redis.call('zrange', Keys.queues, 0, -1)) do
    result[#result + 1] = Queue.counts(now, queue)
  end
  return result
end

-- Jobs that are running, ready or scheduled (not depends, not templates).
function Queue.length(queue)
  return redis.call('zcard', Keys.queue(queue, 'locks'))
    + redis.call('zcard', Keys.queue(queue, 'work'))
    + redis.call('zcard', Keys.queue(queue, 'scheduled'))
end

-- Expired locks first, then timed-out jobs, as one paginated list.
local function stalled_jids(now, queue, offset, count)
  local locks, work = Keys.queue(queue, 'locks'), Keys.queue(queue, 'work')
  local jids = redis.call('zrangebyscore', locks, '-inf', now, 'LIMIT', offset, count)
  if #jids < count then
    local skip = math.max(0, offset - redis.call('zcount', locks, '-inf', now))
    local more = redis.call('zrangebyscore', work, '+inf', '+inf', 'LIMIT', skip, count - #jids)
    for _, jid in ipairs(more) do
      jids[#jids + 1] = jid
    end
  end
  return jids
end

-- jids of one state in one queue. running and stalled are by lock expiry,
-- waiting in pop order, scheduled by due time, depends by put time, recurring
-- by next run. Returns nil for an unknown state.
function Queue.jobs(now, state, queue, offset, count)
  if count <= 0 then
    return {}
  end
  local last = offset + count - 1
  if state == 'running' then
    return redis.call('zrangebyscore', Keys.queue(queue, 'locks'), '(' .. Num.str(now), '+inf',
      'LIMIT', offset, count)
  elseif state == 'stalled' then
    return stalled_jids(now, queue, offset, count)
  elseif state == 'waiting' then
    Queue.catch_up(now, queue)
    return redis.call('zrevrange', Keys.queue(queue, 'work'), offset, last)
  elseif state == 'scheduled' then
    Queue.promote_scheduled(now, queue)
    return redis.call('zrange', Keys.queue(queue, 'scheduled'), offset, last)
  elseif state == 'depends' then
    return redis.call('zrange', Keys.queue(queue, 'depends'), offset, last)
  elseif state == 'recurring' then
    return redis.call('zrange', Keys.queue(queue, 'recur'), offset, last)
  end
  return nil
end

-- Completed jids, newest first.
function Queue.completed(offset, count)
  if count <= 0 then
    return {}
  end
  return redis.call('zrevrange', Keys.completed, offset, offset + count - 1)
end

function Queue.pause(queues)
  for _, queue in ipairs(queues) do
    redis.call('sadd', Keys.paused, queue)
  end
end

function Queue.unpause(queues)
  for _, queue in ipairs(queues) do
    redis.call('srem', Keys.paused, queue)
    -- Workers blocked on the queue should look again.
    Lanner.notify(queue, 1)
  end
end

function Queue.forget(queues)
  for _, queue in ipairs(queues) do
    redis.call('zrem', Keys.queues, queue)
    remembered[queue] = nil
    Limits.unregister(queue)
  end
end

-------------------------------------------------------------------------------
-- Failure groups
-------------------------------------------------------------------------------
-- {group: number of jobs} over every group.
function Queue.failed_groups()
  local result = {}
  for _, group in ipairs(redis.call('smembers', Keys.failures)) do
    result[group] = redis.call('llen', Keys.failed(group))
  end
  return result
end

-- {total, jobs}: a page of one group, most recent failure first.
function Queue.failed(group, start, limit)
  local key = Keys.failed(group)
  local jobs = {}
  if limit > 0 then
    jobs = redis.call('lrange', key, start, start + limit - 1)
  end
  return { total = redis.call('llen', key), jobs = jobs }
end

-- Put the `count` oldest jobs of a failure group into `queue` as waiting jobs
-- with a fresh retry budget. Returns how many moved.
function Queue.unfail(now, queue, group, count)
  if count <= 0 then
    return 0
  end
  local key = Keys.failed(group)
  local jids = redis.call('lrange', key, -count, -1)
  local moved = 0
  -- The list grows at its head, so its tail holds the oldest failures.
  for index = #jids, 1, -1 do
    local job = Job.load(jids[index])
    if job ~= nil and job.state == 'failed' then
      local jid = job.jid
      Job.forget_failure(now, job, false)
      local size = #(job.data or '')
      Limits.entered(queue, size)
      redis.call('hmset', Keys.job(jid), 'queue', queue, 'worker', '', 'expires', 0,
        'remaining', job.retries, 'lanner_size', size)
      Job.record(now, jid, 'put', { q = queue })
      Queue.enqueue(now, queue, jid, 0)
      Events.put(jid, queue)
      moved = moved + 1
    end
  end
  redis.call('ltrim', key, 0, -count - 1)
  if redis.call('llen', key) == 0 then
    redis.call('srem', Keys.failures, group)
  end
  return moved
end
