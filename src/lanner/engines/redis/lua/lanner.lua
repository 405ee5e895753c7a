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
