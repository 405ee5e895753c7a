-------------------------------------------------------------------------------
-- queues.lua: looking at queues: counts, listings, pause, failure groups.
-------------------------------------------------------------------------------

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
    Limits.unlisted(queue)
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
