-------------------------------------------------------------------------------
-- job.lua: the job record, and the commands that act on one job.
-------------------------------------------------------------------------------
-- A job is the hash ql:j:<jid> plus three side keys: its history list and its
-- dependency / dependent sets. Which queue set holds it follows its state
-- (see the header); every state change below moves it between those sets and
-- rewrites `state` in the same call, which is what keeps them consistent.

local JOB_FIELDS = {
  'jid', 'klass', 'state', 'queue', 'worker', 'priority', 'expires', 'retries',
  'remaining', 'data', 'tags', 'failure', 'spawned_from_jid', 'time', 'grace',
  'scheduled', 'lanner_size',
}
-- What pop needs: JOB_FIELDS but the two it does not use, and the job's
-- LIMITS expiry. (Each field asked for costs time: HMGET looks for each one
-- along a small hash, and one the hash does not have, as most have no
-- expiry, costs the whole way: pop asks for no more fields than it did
-- before LIMITS.)
Job.POP_FIELDS = {
  'jid', 'klass', 'state', 'queue', 'worker', 'priority', 'expires', 'retries',
  'remaining', 'data', 'tags', 'failure', 'spawned_from_jid', 'time', 'grace',
  'lanner_expires_at',
}
-- JOB_FIELDS and the expiry, for put's moves.
Job.EXPIRY_FIELDS = {
  'jid', 'klass', 'state', 'queue', 'worker', 'priority', 'expires', 'retries',
  'remaining', 'data', 'tags', 'failure', 'spawned_from_jid', 'time', 'grace',
  'scheduled', 'lanner_size', 'lanner_expires_at',
}
local NUMERIC_FIELDS = {
  priority = true, expires = true, retries = true, remaining = true, time = true,
  scheduled = true, lanner_expires_at = true, lanner_size = true,
}

-- What this call knows of ql:completed, so that completing many jobs does
-- not look at it in full each time: `swept` is a cutoff (text) at which no
-- member was left expired, `size` its number of members. Every change to
-- ql:completed goes through Job.complete, Job.unplace and prune_completed,
-- which keep both right. A sweep only stays valid while the members added
-- (at the call's `now`) are not expired themselves.
local completed = {}
per_call(function()
  completed.swept, completed.size = nil, nil
end)

local function completed_removed(count)
  if completed.size ~= nil then
    completed.size = completed.size - count
  end
end

-- The job's fields as a table (numbers converted), or nil if there is no job;
-- then the raw HMGET reply, which shows what fields the hash has. `fields`
-- (Job.EXPIRY_FIELDS, or a list starting with 'state') loads those fields
-- instead of JOB_FIELDS, for callers that need more or fewer (each field
-- asked for costs time).
function Job.load(jid, fields)
  fields = fields or JOB_FIELDS
  local values = redis.call('hmget', Keys.job(jid), unpack(fields))
  local state_at = fields[3] == 'state' and 3 or 1
  if not values[state_at] then
    -- Every job has a state; without one there is no job.
    return nil, values
  end
  local job = {}
  for index = 1, #fields do
    local field, value = fields[index], values[index]
    if value == false then
      value = nil
    elseif NUMERIC_FIELDS[field] then
      value = tonumber(value)
    end
    job[field] = value
  end
  job.jid = jid
  job.worker = job.worker or ''
  job.queue = job.queue or ''
  job.priority = job.priority or 0
  return job, values
end

function Job.require(jid)
  local job = Job.load(jid)
  if job == nil then
    raise('Job %s does not exist', jid)
  end
  return job
end

-- The caller must hold the job's lock: running, for this worker, and (when
-- `queue` is given) in this queue. A lock that ran out but was not yet handed
-- to anybody else still counts: the worker may finish during the grace period.
function Job.require_lock(job, worker, queue)
  if job.state ~= 'running' then
    raise('Job %s not currently running: %s', job.jid, job.state)
  end
  if job.worker ~= worker then
    raise('Job %s given out to another worker: %s', job.jid, job.worker)
  end
  if queue ~= nil and job.queue ~= queue then
    raise('Job %s running in another queue: %s', job.jid, job.queue)
  end
end

-------------------------------------------------------------------------------
-- History
-------------------------------------------------------------------------------
-- Each entry is a JSON object {what, when, ...} in the list ql:j:<jid>-history.
-- The list is capped at max-job-history, always keeping the first entry (how
-- the job came to exist) and dropping the oldest of the rest.
function Job.record(now, jid, what, extra)
  local entry = extra or {}
  entry.what = what
  entry.when = now
  local key = Keys.history(jid)
  local length = redis.call('rpush', key, cjson.encode(entry))
  local limit = math.max(1, Config.number('max-job-history', 100))
  if length > limit then
    local first = redis.call('lindex', key, 0)
    redis.call('ltrim', key, length - limit + 1, -1)
    redis.call('lpush', key, first)
  end
end

function Job.history(jid)
  local entries = {}
  for index, text in ipairs(redis.call('lrange', Keys.history(jid), 0, -1)) do
    entries[index] = cjson.decode(text)
  end
  return entries
end

-- The representation clients get from get, pop, peek, multiget and track.
-- Empty lists come out as {} (cjson cannot tell an empty array from an empty
-- object); qless clients expect exactly that.
function Job.object(job)
  local jid = job.jid
  return {
    jid = jid,
    klass = job.klass,
    state = job.state,
    queue = job.queue,
    worker = job.worker,
    priority = job.priority,
    expires = job.expires or 0,
    retries = job.retries,
    remaining = job.remaining,
    data = job.data,
    tags = Json.decode(job.tags),
    failure = Json.decode(job.failure),
    history = Job.history(jid),
    dependencies = redis.call('smembers', Keys.dependencies(jid)),
    dependents = redis.call('smembers', Keys.dependents(jid)),
    tracked = Events.is_tracked(jid),
    spawned_from_jid = job.spawned_from_jid or false,
  }
end

-- The object for a jid, or nil.
function Job.get(jid)
  local job = Job.load(jid)
  if job == nil then
    return nil
  end
  return Job.object(job)
end

-------------------------------------------------------------------------------
-- Tags
-------------------------------------------------------------------------------
-- A tag is kept three ways: in the job's JSON `tags` (its order is the order
-- the tags were added), in ql:t:<tag> (jids scored by when they were tagged)
-- and in ql:tags (tags scored by how many jobs carry them).

function Job.index_tags(now, jid, tags)
  for _, tag in ipairs(tags) do
    redis.call('zadd', Keys.tag(tag), now, jid)
    redis.call('zincrby', Keys.tags, 1, tag)
  end
end

function Job.unindex_tags(jid, tags)
  for _, tag in ipairs(tags) do
    if redis.call('zrem', Keys.tag(tag), jid) == 1 then
      if tonumber(redis.call('zincrby', Keys.tags, -1, tag)) <= 0 then
        redis.call('zrem', Keys.tags, tag)
      end
    end
  end
end

-------------------------------------------------------------------------------
-- Leaving a place
-------------------------------------------------------------------------------
-- A failed job leaves its failure group; the day it failed counts one fewer
-- currently-failed job. `listed` false means the caller already took the jid
-- out of the group's list (unfail trims many at once).
function Job.forget_failure(now, job, listed)
  local failure = Json.decode(job.failure, {})
  local group = failure.group
  if group == nil then
    return
  end
  if listed ~= false then
    local key = Keys.failed(group)
    redis.call('lrem', key, 0, job.jid)
    if redis.call('llen', key) == 0 then
      redis.call('srem', Keys.failures, group)
    end
  end
  Stats.count(job.queue, tonumber(failure.when) or 0, 'failed', -1, now)
end

-- Take the job out of every set its current state put it in: queue sets,
-- its worker's jobs, its failure group, or the completed set. (A job loaded
-- whole: a live one gives its queue back the bytes it counts.)
function Job.unplace(now, job)
  local jid = job.jid
  if job.queue ~= '' then
    Queue.forget_tail(job.queue)
    for _, kind in ipairs({ 'work', 'scheduled', 'locks', 'depends' }) do
      redis.call('zrem', Keys.queue(job.queue, kind), jid)
    end
    if LIVE[job.state] then
      Limits.left(job.queue, job.lanner_size)
    end
  end
  Worker.release(job.worker, jid)
  if job.state == 'failed' then
    Job.forget_failure(now, job)
  elseif job.state == 'complete' then
    completed_removed(redis.call('zrem', Keys.completed, jid))
  end
end

-- Remove every key of a job and its tag entries (not its tracking: a tracked
-- job that disappears is reported as expired by `track`).
function Job.delete(jid)
  local tags = Json.decode(present(redis.call('hget', Keys.job(jid), 'tags')), {})
  Job.unindex_tags(jid, tags)
  redis.call('del', Keys.job(jid), Keys.history(jid),
    Keys.dependencies(jid), Keys.dependents(jid))
  Lanner.finished(jid)
end

-- Move a running job (loaded whole) into state failed. `failure_worker` is
-- what the failure record names; `history_worker` (or nil) what the history
-- entry names.
function Job.mark_failed(now, job, group, message, failure_worker, history_worker)
  local jid = job.jid
  redis.call('zrem', Keys.queue(job.queue, 'locks'), jid)
  Limits.left(job.queue, job.lanner_size)
  Worker.release(job.worker, jid)
  Lanner.lock_released(job.queue)
  Job.record(now, jid, 'failed', { group = group, worker = history_worker })
  redis.call('hmset', Keys.job(jid),
    'state', 'failed', 'worker', '', 'expires', 0,
    'failure', cjson.encode({
      group = group, message = message, when = now, worker = failure_worker,
    }))
  redis.call('hdel', Keys.job(jid), 'grace')
  redis.call('lpush', Keys.failed(group), jid)
  redis.call('sadd', Keys.failures, group)
  Stats.count(job.queue, now, 'failures', 1, now)
  Stats.count(job.queue, now, 'failed', 1, now)
  Lanner.finished(jid)
  Job.fail_dependents(now, jid, group, message)
end

-- A job in state depends that carries CASCADE_TAG fails with its dependency,
-- in the call that fails the dependency (a workflow's later steps: nothing
-- is left waiting for a job that will not complete), and so on down; other
-- dependents keep waiting, as in qless. Each failure names the job that
-- failed first, and why.
function Job.fail_dependents(now, jid, group, message)
  local why = string.format('dependency %s failed (%s): %s', jid, group, message)
  local pending = { jid }
  while #pending > 0 do
    local parent = table.remove(pending)
    for _, dependent in ipairs(redis.call('smembers', Keys.dependents(parent))) do
      local key = Keys.job(dependent)
      local state, tags, queue, size = unpack(redis.call('hmget', key,
        'state', 'tags', 'queue', 'lanner_size'))
      if state == 'depends' and string.find(tags or '', CASCADE_TAG_JSON, 1, true) then
        redis.call('zrem', Keys.queue(queue, 'depends'), dependent)
        Limits.left(queue, tonumber(size))
        Job.record(now, dependent, 'failed', { group = DEPENDENCY_FAILED })
        redis.call('hmset', key, 'state', 'failed', 'failure', cjson.encode({
          group = DEPENDENCY_FAILED, message = why, when = now, worker = '',
        }))
        redis.call('lpush', Keys.failed(DEPENDENCY_FAILED), dependent)
        redis.call('sadd', Keys.failures, DEPENDENCY_FAILED)
        Stats.count(queue, now, 'failures', 1, now)
        Stats.count(queue, now, 'failed', 1, now)
        Lanner.finished(dependent)
        Events.failed(dependent, '', DEPENDENCY_FAILED, why)
        Events.tracked(dependent, 'failed')
        table.insert(pending, dependent)
      end
    end
  end
end

-------------------------------------------------------------------------------
-- Dependencies
-------------------------------------------------------------------------------
-- Link jid to each dependency that can still hold it back: a jid that does
-- not exist, or a job already complete, is treated as already satisfied.
function Job.add_dependencies(jid, depends)
  for _, dependency in ipairs(depends) do
    if dependency ~= jid then
      local state = present(redis.call('hget', Keys.job(dependency), 'state'))
      if state ~= nil and state ~= 'complete' then
        redis.call('sadd', Keys.dependencies(jid), dependency)
        redis.call('sadd', Keys.dependents(dependency), jid)
      end
    end
  end
end

function Job.drop_dependencies(jid, depends)
  for _, dependency in ipairs(depends) do
    redis.call('srem', Keys.dependencies(jid), dependency)
    redis.call('srem', Keys.dependents(dependency), jid)
  end
end

-- A job in state depends with no dependency left becomes waiting, or
-- scheduled if the delay it was put with has not passed yet. It keeps the
-- sequence number its put gave it.
function Job.release_if_ready(now, jid)
  if redis.call('scard', Keys.dependencies(jid)) > 0 then
    return
  end
  local job = Job.load(jid)
  if job == nil or job.state ~= 'depends' then
    return
  end
  redis.call('zrem', Keys.queue(job.queue, 'depends'), jid)
  local delay = 0
  if job.scheduled ~= nil and job.scheduled > now then
    delay = job.scheduled - now
  end
  Queue.enqueue(now, job.queue, jid, delay, true)
end

-- On completion, the job stops holding back its dependents. They are released
-- in put order, so that each lands behind the one before and no job has to
-- move to make room (see Queue.place).
function Job.release_dependents(now, jid)
  local dependents = redis.call('smembers', Keys.dependents(jid))
  local seq = {}
  for _, dependent in ipairs(dependents) do
    seq[dependent] = tonumber(redis.call('hget', Keys.job(dependent), 'lanner_seq')) or 0
  end
  table.sort(dependents, function(a, b) return seq[a] < seq[b] end)
  for _, dependent in ipairs(dependents) do
    redis.call('srem', Keys.dependencies(dependent), jid)
    Job.release_if_ready(now, dependent)
  end
  if #dependents > 0 then
    -- (With no member the set does not exist: nothing to delete.)
    redis.call('del', Keys.dependents(jid))
  end
end

-------------------------------------------------------------------------------
-- Completed jobs and retention
-------------------------------------------------------------------------------
-- At most this many expired jobs are deleted per completion, so one call stays
-- short even after jobs-history is lowered; the rest go on later completions.
local PRUNE_BATCH = 1000

local function prune_completed(now)
  local history = Config.number('jobs-history', 604800)
  local cutoff = Num.str(now - history)
  if completed.swept ~= cutoff then
    local expired = redis.call('zrangebyscore', Keys.completed, '-inf', cutoff,
      'LIMIT', 0, PRUNE_BATCH)
    for _, jid in ipairs(expired) do
      Job.delete(jid)
      completed_removed(redis.call('zrem', Keys.completed, jid))
    end
    if #expired < PRUNE_BATCH and now - history < now then
      completed.swept = cutoff
    end
  end

  local keep = Config.number('jobs-history-count', 50000)
  if completed.size == nil then
    completed.size = redis.call('zcard', Keys.completed)
  end
  local excess = completed.size - keep
  if excess > 0 then
    local oldest = redis.call('zrange', Keys.completed, 0, math.min(excess, PRUNE_BATCH) - 1)
    for _, jid in ipairs(oldest) do
      Job.delete(jid)
      completed_removed(redis.call('zrem', Keys.completed, jid))
    end
  end
end

-------------------------------------------------------------------------------
-- Commands on a running job
-------------------------------------------------------------------------------
-- data == nil leaves the job's data as it is.
function Job.heartbeat(now, jid, worker, data)
  local job = Job.require(jid)
  Job.require_lock(job, worker, nil)
  local expires = Job.renew(now, job, worker, data)
  Worker.seen(now, worker)
  return expires
end

-- Renew the lock `worker` holds on `job` (as loaded: its queue and grace) to
-- now + its queue's heartbeat, replacing its data if given; return the new
-- expiry. `renewed` (lanner.heartbeat_many) collects the expiry and jid by
-- queue instead of updating the queue's -locks and the worker's jobs; the
-- caller does that for all at once.
function Job.renew(now, job, worker, data, renewed)
  local key, jid = Keys.job(job.jid), job.jid
  local expires = now + Config.heartbeat(job.queue)
  if data ~= nil then
    redis.call('hset', key, 'data', data)
  end
  -- A renewed lock starts afresh: the next expiry gets its own grace period.
  redis.call('hset', key, 'expires', expires)
  if job.grace ~= nil then
    redis.call('hdel', key, 'grace')
  end
  if renewed then
    local locks = renewed[job.queue]
    if locks == nil then
      locks = {}
      renewed[job.queue] = locks
      renewed[#renewed + 1] = job.queue
    end
    locks[#locks + 1] = expires
    locks[#locks + 1] = jid
  else
    redis.call('zadd', Keys.queue(job.queue, 'locks'), expires, jid)
    Worker.hold(worker, jid, expires)
  end
  return expires
end

-- options: next (queue), delay, depends (list), and lanner's result (JSON
-- text the completed job keeps). Returns the new state.
-- `loaded` is the job as just loaded (with its lanner_size, and its data if
-- it may advance), when the caller has it. `released`
-- (lanner.complete_many) collects the jid instead of taking it out of the
-- queue's -locks and the worker's jobs; the caller does that for all at once.
function Job.complete(now, jid, worker, queue, data, options, loaded, released)
  local job = loaded or Job.require(jid)
  Job.require_lock(job, worker, queue)
  local key = Keys.job(jid)
  local next_queue = options.next

  if released then
    released[#released + 1] = jid
  else
    redis.call('zrem', Keys.queue(queue, 'locks'), jid)
    Worker.release(worker, jid)
  end
  Lanner.lock_released(queue)
  Limits.left(queue, job.lanner_size)
  if job.time ~= nil then
    Stats.record('run', queue, now, now - job.time)
  end
  Job.record(now, jid, 'done')
  if job.failure ~= nil and job.grace ~= nil then
    redis.call('hdel', key, 'failure', 'grace')
  elseif job.failure ~= nil then
    redis.call('hdel', key, 'failure')
  elseif job.grace ~= nil then
    redis.call('hdel', key, 'grace')
  end
  local fields = { 'worker', '', 'expires', 0 }
  if data ~= nil then
    fields[#fields + 1], fields[#fields + 2] = 'data', data
  end
  if next_queue ~= nil then
    -- The next queue counts the job's data as it now is.
    local size = #(data or job.data)
    Limits.entered(next_queue, size)
    fields[#fields + 1], fields[#fields + 2] = 'queue', next_queue
    fields[#fields + 1], fields[#fields + 2] = 'remaining', job.retries
    fields[#fields + 1], fields[#fields + 2] = 'lanner_size', size
  else
    fields[#fields + 1], fields[#fields + 2] = 'state', 'complete'
    fields[#fields + 1], fields[#fields + 2] = 'queue', ''
    if options.result ~= nil then
      fields[#fields + 1], fields[#fields + 2] = 'result', options.result
    end
  end
  redis.call('hmset', key, unpack(fields))
  Events.tracked(jid, 'completed')

  if next_queue ~= nil then
    -- Advance: the job starts over in the next queue with a fresh retry budget.
    Events.advanced(jid, queue, next_queue)
    Job.add_dependencies(jid, options.depends or {})
    Job.record(now, jid, 'put', { q = next_queue })
    return Queue.enqueue(now, next_queue, jid, options.delay or 0)
  end

  Events.completed(jid, queue)
  local added = redis.call('zadd', Keys.completed, now, jid)
  if completed.size ~= nil then
    completed.size = completed.size + added
  end
  Job.release_dependents(now, jid)
  prune_completed(now)
  Lanner.finished(jid)
  return 'complete'
end

-- data == nil leaves the job's data as it is. Returns the jid.
function Job.fail(now, jid, worker, group, message, data)
  local job = Job.require(jid)
  Job.require_lock(job, worker, nil)
  if data ~= nil then
    redis.call('hset', Keys.job(jid), 'data', data)
  end
  Job.mark_failed(now, job, group, message, worker, worker)
  Events.failed(jid, worker, group, message)
  Events.tracked(jid, 'failed')
  return jid
end

-- Give the job back to its queue, spending one retry. When no retry is left it
-- fails instead: into `group` if given, else failed-retries-<queue>. Returns
-- the retries left (-1 when it failed).
function Job.retry(now, jid, queue, worker, delay, group, message)
  local job = Job.require(jid)
  Job.require_lock(job, worker, queue)
  local remaining = (job.remaining or 0) - 1
  redis.call('hset', Keys.job(jid), 'remaining', remaining)

  if remaining < 0 then
    -- Only the tracked-job channel hears about it; there is no ql:log event.
    -- The failure names the worker only when the caller chose the group.
    local failure_worker = ''
    if group ~= nil then
      failure_worker = worker
    else
      group = 'failed-retries-' .. queue
      message = string.format('Job exhausted retries in queue "%s"', queue)
    end
    Job.mark_failed(now, job, group, message or '', failure_worker, nil)
    Events.tracked(jid, 'failed')
    return remaining
  end

  redis.call('zrem', Keys.queue(queue, 'locks'), jid)
  Worker.release(worker, jid)
  redis.call('hmset', Keys.job(jid), 'worker', '', 'expires', 0)
  redis.call('hdel', Keys.job(jid), 'grace')
  -- Not in qless (its history says nothing of a retry with retries left): lanner's
  -- `retried` entry shows the run failed, and why by its group when given.
  Job.record(now, jid, 'retried', { worker = worker, group = group })
  Queue.enqueue(now, queue, jid, delay)
  Lanner.lock_released(queue)
  return remaining
end

-------------------------------------------------------------------------------
-- Commands on any job
-------------------------------------------------------------------------------
-- Delete jobs and everything about them. All jids are checked first: a job
-- that another job still depends on can only go together with that job.
-- Completed jobs are left to retention. Returns the jids as given.
function Job.cancel(now, jids)
  local canceling = {}
  for _, jid in ipairs(jids) do
    canceling[jid] = true
  end
  for _, jid in ipairs(jids) do
    for _, dependent in ipairs(redis.call('smembers', Keys.dependents(jid))) do
      if not canceling[dependent] then
        raise('Job %s is a dependency of %s, which is not being canceled', jid, dependent)
      end
    end
  end

  for _, jid in ipairs(jids) do
    local job = Job.load(jid)
    if job ~= nil and job.state ~= 'complete' then
      Job.unplace(now, job)
      if job.state == 'running' then
        Lanner.lock_released(job.queue)
      end
      Job.drop_dependencies(jid, redis.call('smembers', Keys.dependencies(jid)))
      Events.canceled(jid, job.queue, job.worker)
      Events.tracked(jid, 'canceled')
      redis.call('zrem', Keys.tracked, jid)
      Job.delete(jid)
    end
  end
  return jids
end

-- Take the lock away from running jobs now. Each becomes `stalled` and goes
-- to the very front of its queue (score +inf); its next pop does not spend a
-- retry, since a forced timeout is an operator's decision.
function Job.timeout(now, jids)
  local jobs = {}
  for _, jid in ipairs(jids) do
    local job = Job.require(jid)
    if job.state ~= 'running' then
      raise('Job %s not currently running: %s', jid, job.state)
    end
    jobs[#jobs + 1] = job
  end
  for _, job in ipairs(jobs) do
    local jid = job.jid
    redis.call('zrem', Keys.queue(job.queue, 'locks'), jid)
    Worker.release(job.worker, jid)
    Job.record(now, jid, 'timed-out')
    redis.call('hmset', Keys.job(jid), 'state', 'stalled', 'worker', '', 'expires', 0,
      'time', now)
    redis.call('hdel', Keys.job(jid), 'grace')
    redis.call('zadd', Keys.queue(job.queue, 'work'), '+inf', jid)
    Events.tracked(jid, 'stalled')
    Events.lock_lost(jid, job.worker)
    Lanner.notify(job.queue, 1)
  end
end

-- Change a job's priority. A waiting job moves to its new place in its queue,
-- keeping its ready time and sequence number.
function Job.set_priority(jid, priority)
  local job = Job.require(jid)
  redis.call('hset', Keys.job(jid), 'priority', priority)
  if job.state == 'waiting' and redis.call('zrem', Keys.queue(job.queue, 'work'), jid) == 1 then
    Queue.place(job.queue, jid)
  end
  return priority
end

-- Append a custom history entry; fields of `data` go into the entry. A
-- 'progress' entry (a task's progress: fraction, message) replaces the last
-- entry if that is one too, so that a long task keeps its history, and is
-- announced on ql:log.
function Job.log(now, jid, message, data)
  local job = Job.require(jid)
  local extra = {}
  for key, value in pairs(data or {}) do
    extra[key] = value
  end
  if message ~= 'progress' then
    Job.record(now, jid, message, extra)
    return true
  end
  local key = Keys.history(jid)
  local last = redis.call('lindex', key, -1)
  if last and redis.call('llen', key) > 1 and cjson.decode(last).what == 'progress' then
    extra.what, extra.when = message, now
    redis.call('lset', key, -1, cjson.encode(extra))
  else
    Job.record(now, jid, message, extra)
  end
  Events.log({
    'jid', jid, 'event', 'progress', 'queue', job.queue,
    'fraction', extra.fraction, 'message', extra.message,
  })
  return true
end

-------------------------------------------------------------------------------
-- Dependencies of a job in state depends
-------------------------------------------------------------------------------
local function require_depends(jid)
  local state = present(redis.call('hget', Keys.job(jid), 'state'))
  if state ~= 'depends' then
    raise('Job %s not in the depends state: %s', jid, tostring(state or 'missing'))
  end
end

function Job.depends_on(jid, depends)
  require_depends(jid)
  Job.add_dependencies(jid, depends)
  return true
end

-- depends == nil drops them all.
function Job.depends_off(now, jid, depends)
  require_depends(jid)
  Job.drop_dependencies(jid, depends or redis.call('smembers', Keys.dependencies(jid)))
  Job.release_if_ready(now, jid)
  return true
end

-------------------------------------------------------------------------------
-- Tags and tracking
-------------------------------------------------------------------------------
-- Returns the job's tags after the change.
function Job.tag(now, jid, tags)
  local job = Job.require(jid)
  local current = Json.decode(job.tags, {})
  local has, added = {}, {}
  for _, tag in ipairs(current) do
    has[tag] = true
  end
  for _, tag in ipairs(tags) do
    if not has[tag] then
      has[tag] = true
      current[#current + 1] = tag
      added[#added + 1] = tag
    end
  end
  redis.call('hset', Keys.job(jid), 'tags', Json.array(current))
  Job.index_tags(now, jid, added)
  return current
end

function Job.untag(jid, tags)
  local job = Job.require(jid)
  local dropping, kept, removed = {}, {}, {}
  for _, tag in ipairs(tags) do
    dropping[tag] = true
  end
  for _, tag in ipairs(Json.decode(job.tags, {})) do
    if dropping[tag] then
      removed[#removed + 1] = tag
    else
      kept[#kept + 1] = tag
    end
  end
  redis.call('hset', Keys.job(jid), 'tags', Json.array(kept))
  Job.unindex_tags(jid, removed)
  return kept
end

-- {total, jobs}: jids with the tag, oldest tagging first.
function Job.tagged(tag, offset, count)
  local key = Keys.tag(tag)
  return {
    total = redis.call('zcard', key),
    jobs = redis.call('zrange', key, offset, offset + count - 1),
  }
end

-- The most used tags; a tag on a single job is not interesting here.
function Job.top_tags(offset, count)
  return redis.call('zrevrangebyscore', Keys.tags, '+inf', 2, 'LIMIT', offset, count)
end

function Job.track(now, jid)
  Job.require(jid)
  redis.call('zadd', Keys.tracked, now, jid)
  Events.tracking_changed()
  Events.bare('track', jid)
  return true
end

function Job.untrack(jid)
  redis.call('zrem', Keys.tracked, jid)
  Events.bare('untrack', jid)
  return true
end

-- {jobs = [object...], expired = [jid...]}: expired jids are tracked jobs
-- that no longer exist (deleted by retention or canceled elsewhere).
function Job.tracked()
  local result = { jobs = {}, expired = {} }
  for _, jid in ipairs(redis.call('zrange', Keys.tracked, 0, -1)) do
    local object = Job.get(jid)
    if object ~= nil then
      result.jobs[#result.jobs + 1] = object
    else
      result.expired[#result.expired + 1] = jid
    end
  end
  return result
end
