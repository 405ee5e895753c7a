-------------------------------------------------------------------------------
-- job_commands.lua: the commands that act on one job (after job.lua's record).
-------------------------------------------------------------------------------
-- Each command loads the job, checks the caller may act on it, and moves it
-- with job.lua's and queue.lua's helpers.

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
    if job.lanner_size == nil and not job.jid_stored then
      -- Its queue goes on counting the data it came in with.
      redis.call('hset', key, 'data', data, 'lanner_size', Job.size(job))
    else
      redis.call('hset', key, 'data', data)
    end
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
-- queue's -locks and the worker's jobs, and `released.completed` collects a
-- completed one instead of adding it to ql:completed; the caller does that
-- for all at once (Job.add_completed). `line`: the `done` entry, encoded
-- once for them all.
function Job.complete(now, jid, worker, queue, data, options, loaded, released, line)
  local job = loaded or Job.require(jid, Job.RECORD_FIELDS)
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
  Limits.left(queue, Job.size(job))
  if job.time ~= nil then
    Stats.record('run', queue, now, now - job.time)
  end
  Job.record(now, jid, 'done', nil, job, line)
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
  if released then
    released.completed[#released.completed + 1] = jid
  else
    local added = redis.call('zadd', Keys.completed, now, jid)
    if completed.size ~= nil then
      completed.size = completed.size + added
    end
  end
  Job.release_dependents(now, jid)
  if not released then
    prune_completed(now)
  end
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
  Job.unshorten_history(jid)
  local key = Keys.history(jid)
  local last = redis.call('lindex', key, -1)
  if last and redis.call('llen', key) > 1 and cjson.decode(last).what == 'progress' then
    redis.call('lset', key, -1, Job.entry(now, message, extra))
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
