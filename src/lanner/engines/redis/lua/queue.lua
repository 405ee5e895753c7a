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
function Queue.remember(now, queue)
  if not redis.call('zscore', Keys.queues, queue) then
    redis.call('zadd', Keys.queues, now, queue)
  end
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

-- The job goes to the back of the line of jobs ready at the same time.
function Queue.take_seq(jid)
  redis.call('hset', Keys.job(jid), 'lanner_seq', redis.call('incr', Keys.seq))
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
function Queue.place(queue, jid)
  local work = Keys.queue(queue, 'work')
  local mine = Queue.order(jid)
  local function member(rank)
    local found = redis.call('zrevrange', work, rank, rank, 'WITHSCORES')
    return found[1], tonumber(found[2])
  end
  local function goes_ahead(rank)
    local other, score = member(rank)
    return score == math.huge or Queue.ahead(Queue.order(other), mine)
  end
  -- The first rank whose job does not go ahead of this one; the last rank
  -- first, as a new job mostly goes behind all others.
  local low, high = 0, redis.call('zcard', work)
  if high > 0 and goes_ahead(high - 1) then
    low = high
  end
  while low < high do
    local middle = math.floor((low + high) / 2)
    if goes_ahead(middle) then
      low = middle + 1
    else
      high = middle
    end
  end
  local score = Queue.score(mine[1], mine[2])
  if low > 0 then
    local _, ahead = member(low - 1)
    if ahead <= score then
      score = below(ahead)
    end
  end
  make_room(work, low, score)
  redis.call('zadd', work, score, jid)
end

-------------------------------------------------------------------------------
-- Putting jobs in
-------------------------------------------------------------------------------
-- Place a job whose hash is otherwise up to date into `queue`: depends if it
-- still waits on another job, else scheduled if delayed, else waiting.
-- Writes state and time (when it became ready) and returns the state. The job
-- takes a new sequence number unless `keep_seq` (a dependency release).
function Queue.enqueue(now, queue, jid, delay, keep_seq)
  local key = Keys.job(jid)
  if not keep_seq then
    Queue.take_seq(jid)
  end
  local state
  if redis.call('scard', Keys.dependencies(jid)) > 0 then
    state = 'depends'
    redis.call('zadd', Keys.queue(queue, 'depends'), now, jid)
    if delay > 0 then
      -- Remembered so the delay still applies once the dependencies are met.
      redis.call('hset', key, 'scheduled', now + delay)
    else
      redis.call('hdel', key, 'scheduled')
    end
  elseif delay > 0 then
    state = 'scheduled'
    redis.call('zadd', Keys.queue(queue, 'scheduled'), now + delay, jid)
    redis.call('hdel', key, 'scheduled')
  else
    state = 'waiting'
    redis.call('hdel', key, 'scheduled')
  end
  redis.call('hmset', key, 'state', state, 'time', now)
  if state == 'waiting' then
    Queue.place(queue, jid)
    Lanner.notify(queue, 1)
  end
  Queue.remember(now, queue)
  return state
end

-- Create a job, or move an existing one (from whatever queue and state it is
-- in). options: priority, tags (list), retries, depends (list); on a move an
-- option left out keeps the job's old value, and depends replaces the old
-- dependencies only when given. `worker` is who asks: if the job was running
-- for somebody else, that worker is told it lost the lock. `spawned_from` is
-- the recurring template of a spawned job. Returns the jid.
function Queue.put(now, worker, queue, jid, klass, data, delay, options, spawned_from)
  local old = Job.load(jid)
  local priority, retries, tags = options.priority, options.retries, options.tags

  if old ~= nil then
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
  redis.call('hmset', key,
    'jid', jid, 'klass', klass, 'data', data, 'priority', priority,
    'tags', Json.array(tags), 'queue', queue, 'worker', '', 'expires', 0,
    'retries', retries, 'remaining', retries)
  redis.call('hdel', key, 'grace')
  if spawned_from ~= nil then
    redis.call('hset', key, 'spawned_from_jid', spawned_from)
  end
  Job.record(now, jid, 'put', { q = queue })
  Queue.enqueue(now, queue, jid, delay)

  Events.put(jid, queue)
  Events.tracked(jid, 'put')
  if old ~= nil and old.state == 'running' and old.worker ~= worker then
    Events.lock_lost(jid, old.worker)
  end
  return jid
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
local function lock(now, queue, worker, job, from_work)
  local jid = job.jid
  local expires = now + Config.heartbeat(queue)
  if from_work then
    redis.call('zrem', Keys.queue(queue, 'work'), jid)
    if job.time ~= nil then
      Stats.record('wait', queue, now, now - job.time)
      -- Kept so lanner.release can put the job back in its old place.
      redis.call('hset', Keys.job(jid), 'ready', job.time)
    end
  else
    Worker.release(job.worker, jid)
  end
  redis.call('zadd', Keys.queue(queue, 'locks'), expires, jid)
  Worker.hold(worker, jid, expires)
  redis.call('hmset', Keys.job(jid), 'state', 'running', 'worker', worker,
    'expires', expires, 'time', now, 'remaining', job.remaining)
  redis.call('hdel', Keys.job(jid), 'grace')
  Job.record(now, jid, 'popped', { worker = worker })
  Events.tracked(jid, 'popped')
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

local function objects(jids)
  local result = {}
  for _, jid in ipairs(jids) do
    result[#result + 1] = Job.get(jid)
  end
  return result
end

-- Lock up to `count` jobs for `worker`: expired locks first, then waiting jobs
-- by score. Returns their objects.
function Queue.pop(now, queue, worker, count)
  Worker.seen(now, worker)
  if redis.call('sismember', Keys.paused, queue) == 1 then
    Lanner.quiet(queue)
    return {}
  end
  local free = room(now, queue)
  local limit = math.min(count, free or count)
  local taken = {}
  local left_over = reclaim_expired(now, queue, worker, limit, taken)
  Queue.catch_up(now, queue)

  if #taken < limit then
    local jids = redis.call('zrevrange', Keys.queue(queue, 'work'), 0, limit - #taken - 1)
    for _, jid in ipairs(jids) do
      local job = Job.load(jid)
      if job == nil then
        redis.call('zrem', Keys.queue(queue, 'work'), jid)
      else
        lock(now, queue, worker, job, true)
        taken[#taken + 1] = jid
      end
    end
  end
  Lanner.after_pop(queue, free ~= nil and #taken >= free, left_over)
  return objects(taken)
end

-- The jobs pop would hand out next, without locking them. Like pop it spawns
-- due recurring jobs and promotes due scheduled ones; unlike pop it ignores
-- pause and max-concurrency, and leaves expired locks alone.
function Queue.peek(now, queue, count)
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
      redis.call('hmset', Keys.job(jid), 'queue', queue, 'worker', '', 'expires', 0,
        'remaining', job.retries)
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
