-------------------------------------------------------------------------------
-- worker.lua: who is working, and on what.
-------------------------------------------------------------------------------
-- ql:workers is a zset of worker names scored by when each was last seen (pop
-- or heartbeat). ql:w:<worker>:jobs is a zset of the jids the worker holds,
-- scored by lock expiry, so "stalled" is simply a score in the past. Both are
-- for reporting: the authority on a lock is the queue's -locks zset and the
-- job hash.

function Worker.seen(now, worker)
  redis.call('zadd', Keys.workers, now, worker)
end

function Worker.hold(worker, jid, expires)
  redis.call('zadd', Keys.worker_jobs(worker), expires, jid)
end

function Worker.release(worker, jid)
  if worker ~= nil and worker ~= '' then
    redis.call('zrem', Keys.worker_jobs(worker), jid)
  end
end

-- {jobs = [jid...], stalled = [jid...]} for one worker (known or not).
function Worker.jobs(now, worker)
  local key = Keys.worker_jobs(worker)
  return {
    jobs = redis.call('zrangebyscore', key, '(' .. Num.str(now), '+inf'),
    stalled = redis.call('zrangebyscore', key, '-inf', now),
  }
end

-- Every worker seen within max-worker-age, most recently seen first, with
-- counts. Older workers are forgotten here; this is the only place that
-- prunes them.
function Worker.list(now)
  local cutoff = Num.str(now - Config.number('max-worker-age', 86400))
  for _, worker in ipairs(redis.call('zrangebyscore', Keys.workers, '-inf', cutoff)) do
    redis.call('del', Keys.worker_jobs(worker))
  end
  redis.call('zremrangebyscore', Keys.workers, '-inf', cutoff)

  local result = {}
  local after_now = '(' .. Num.str(now)
  for _, worker in ipairs(redis.call('zrevrange', Keys.workers, 0, -1)) do
    local key = Keys.worker_jobs(worker)
    result[#result + 1] = {
      name = worker,
      jobs = redis.call('zcount', key, after_now, '+inf'),
      stalled = redis.call('zcount', key, '-inf', now),
    }
  end
  return result
end

function Worker.deregister(workers)
  for _, worker in ipairs(workers) do
    redis.call('zrem', Keys.workers, worker)
    redis.call('del', Keys.worker_jobs(worker))
  end
end
