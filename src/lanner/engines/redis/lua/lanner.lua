-------------------------------------------------------------------------------
-- lanner.lua: lanner's additions to the qless protocol.
-------------------------------------------------------------------------------
-- The additions are new keys under ql:lanner:* and new commands named
-- lanner.*; a qless client never needs them. (The order of waiting jobs,
-- which lanner changes for every caller, lives in queue.lua: Queue.place.)

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

-- The list keeps at least this many of its newest tokens: enough to wake every
-- worker of any sane deployment. It is trimmed back to that once it holds
-- twice as many, not at every push: when nobody listens (jobs published with
-- no worker blocked), a put pushes its token and trims once in NOTIFY_CAP
-- puts instead of every time. Bounded either way.
local NOTIFY_CAP = 256

-- Tokens are counted during the call and pushed by Lanner.flush when the
-- command ends (api_lanner.lua), one RPUSH per queue: nobody can BLPOP the list
-- while the script runs, and the list ends up the same as pushing them one by
-- one.
local pending_tokens, pending_queues
per_call(function()
  pending_tokens, pending_queues = {}, {}
end)

function Lanner.notify(queue, count)
  if count <= 0 then
    return
  end
  if pending_tokens[queue] == nil then
    pending_queues[#pending_queues + 1] = queue
    pending_tokens[queue] = 0
  end
  pending_tokens[queue] = pending_tokens[queue] + count
end

-- Drop the queue's tokens: there is nothing a woken worker could get now.
function Lanner.quiet(queue)
  if pending_tokens[queue] ~= nil then
    pending_tokens[queue] = 0
  end
  redis.call('del', Keys.notify(queue))
end

-------------------------------------------------------------------------------
-- Hand-off to blocked workers
-------------------------------------------------------------------------------
-- A worker about to block on a queue (lanner.pop_wait) registers in
-- ql:lanner:waiting:<queue> (score: until when; its batch size in
-- ql:lanner:waiting-count:<queue>) and BLPOPs its own hand-off list
-- ql:lanner:handoff:<queue>:<worker> as well as the wake-up list. When jobs
-- become ready in a command, its end pops them for the registered workers
-- (Queue.pop, exactly as if they had asked) and pushes each one's jobs, as
-- pop's JSON reply, to its hand-off list: a blocked worker receives its work
-- in the BLPOP reply itself, one round trip sooner than waking up to pop.
-- A worker's next lanner.pop_wait ends its registration and takes whatever
-- was handed to it meanwhile, so a live worker loses nothing. A registration
-- left by a worker that died lapses at its `until` (the worker's BLPOP
-- timeout); jobs handed off before that wait for their lock to run out.

-- Handed-off work nobody collects (its worker died) is dropped after this.
local HANDOFF_TTL = 3600

local function stop_waiting(queue, worker)
  if redis.call('zrem', Keys.waiting(queue), worker) == 1 then
    redis.call('hdel', Keys.waiting_counts(queue), worker)
  end
end

-- Pop for the workers waiting on `queue` while jobs came ready in this call,
-- the one whose wait ends soonest first.
local function hand_off(now, queue)
  if not Limits.may_wait(queue, now) then
    return
  end
  local waiting = Keys.waiting(queue)
  while pending_tokens[queue] > 0 do
    local worker = redis.call('zrangebyscore', waiting, Num.str(now), '+inf', 'LIMIT', 0, 1)[1]
    if worker == nil then
      return
    end
    local count = tonumber(redis.call('hget', Keys.waiting_counts(queue), worker)) or 1
    stop_waiting(queue, worker)
    local jobs = Queue.pop(now, queue, worker, count)
    if #jobs == 0 then
      return
    end
    local key = Keys.handoff(queue, worker)
    redis.call('rpush', key, Job.texts_array(jobs))
    redis.call('expire', key, HANDOFF_TTL)
    pending_tokens[queue] = math.max(0, pending_tokens[queue] - #jobs)
  end
end

-- Registrations that ran out were left by workers that stopped without
-- saying so (they died).
local function forget_lapsed(now, queue)
  local waiting = Keys.waiting(queue)
  local lapsed = redis.call('zrangebyscore', waiting, '-inf', '(' .. Num.str(now))
  if #lapsed > 0 then
    redis.call('zrem', waiting, unpack(lapsed))
    redis.call('hdel', Keys.waiting_counts(queue), unpack(lapsed))
  end
end

-- Jobs handed to `worker` that it has not received, as pop objects (JSON
-- texts): those it still holds (the lock of one left too long may have gone
-- elsewhere).
local function collect_handoffs(queue, worker)
  local key = Keys.handoff(queue, worker)
  local handed = redis.call('lrange', key, 0, -1)
  local jobs = {}
  if #handed == 0 then
    return jobs
  end
  redis.call('del', key)
  for _, text in ipairs(handed) do
    for _, object in ipairs(cjson.decode(text)) do
      local job = Job.load(object.jid)
      if job ~= nil and job.state == 'running' and job.worker == worker
          and job.queue == queue then
        jobs[#jobs + 1] = Job.object_text(job)
      end
    end
  end
  return jobs
end

-- lanner.pop_wait: pop for a worker that will block if it gets nothing. It
-- stops waiting (if it was), takes what was handed to it, pops the rest, and
-- when it has nothing registers to wait until now + wait (wait = 0: not).
-- Returns the jobs' objects as JSON texts.
function Lanner.pop_wait(now, queue, worker, count, wait)
  stop_waiting(queue, worker)
  local jobs = collect_handoffs(queue, worker)
  if #jobs < count then
    for _, object in ipairs(Queue.pop(now, queue, worker, count - #jobs)) do
      jobs[#jobs + 1] = object
    end
  end
  if #jobs == 0 and wait > 0 then
    forget_lapsed(now, queue)
    redis.call('zadd', Keys.waiting(queue), now + wait, worker)
    redis.call('hset', Keys.waiting_counts(queue), worker, count)
    Limits.waits_until(queue, now + wait)
  end
  return jobs
end

-- At the end of a command: hand the jobs that came ready to waiting workers,
-- then push a token for each one left.
function Lanner.flush(now)
  for _, queue in ipairs(pending_queues) do
    if pending_tokens[queue] > 0 then
      hand_off(now, queue)
    end
    local count = pending_tokens[queue]
    if count > 0 then
      local key = Keys.notify(queue)
      local tokens = {}
      for index = 1, math.min(count, NOTIFY_CAP) do
        tokens[index] = '1'
      end
      local length = redis.call('rpush', key, unpack(tokens))
      if length > 2 * NOTIFY_CAP then
        redis.call('ltrim', key, -NOTIFY_CAP, -1)
      end
    end
  end
end

-- A lock was given up (complete, fail, retry, cancel). In a queue with a
-- concurrency limit that may let a waiting job run, so wake a worker.
function Lanner.lock_released(queue)
  Flow.lock_released(queue)
  if Config.max_concurrency(queue) > 0
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
-- Results, and waiting for a job to finish
-------------------------------------------------------------------------------
-- A completed job may keep what its task returned in its hash's `result`
-- field (qless clients never see it); it goes with the hash, at retention,
-- and a put of the job drops it. A client waiting for a job to finish
-- (lanner.await) registers in ql:lanner:awaited (jid -> until when); the
-- command that finishes the job (complete, fail, retries run out, cancel, or
-- retention deleting it) then pushes a token to ql:lanner:finished:<jid>,
-- which the client BLPOPs. Tokens nobody collects expire.
local FINISHED_TTL = 60

-- Whether ql:lanner:awaited exists, asked once per call: mostly nobody
-- awaits, and a batch's jobs then need no HDEL each.
local any_awaited
per_call(function()
  any_awaited = nil
end)

function Lanner.finished(jid)
  if any_awaited == nil then
    any_awaited = redis.call('exists', Keys.awaited) == 1
  end
  if any_awaited and redis.call('hdel', Keys.awaited, jid) == 1 then
    local key = Keys.finished(jid)
    redis.call('rpush', key, '1')
    redis.call('expire', key, FINISHED_TTL)
  end
end

-- The job object with lanner's fields: `result` (or false), and `due` (or
-- false): when a waiting job became ready, or a scheduled one falls due.
function Lanner.object(jid)
  local job = Job.load(jid)
  if job == nil then
    return nil
  end
  local object = Job.object(job)
  object.result = present(redis.call('hget', Keys.job(jid), 'result')) or false
  object.due = false
  if job.state == 'waiting' then
    object.due = job.time or false
  elseif job.state == 'scheduled' then
    object.due = tonumber(redis.call('zscore', Keys.queue(job.queue, 'scheduled'), jid)) or false
  end
  return object
end

-- lanner.await: 'finished' and the job if it is complete or failed; 'gone'
-- if there is no such job; else 'pending', the waiter registered until `till`.
function Lanner.await(jid, till)
  local state = present(redis.call('hget', Keys.job(jid), 'state'))
  if state == nil then
    return 'gone'
  elseif state == 'complete' or state == 'failed' then
    return 'finished', Lanner.object(jid)
  end
  local registered = tonumber(redis.call('hget', Keys.awaited, jid))
  if registered == nil or registered < till then
    redis.call('hset', Keys.awaited, jid, Num.str(till))
    any_awaited = true
  end
  return 'pending'
end

-------------------------------------------------------------------------------
-- Commands
-------------------------------------------------------------------------------
-- Where qless's reply or behaviour differs from lanner's contract
-- (docs/protocol.md), lanner's Python engine calls these instead; the qless
-- commands themselves stay as qless clients expect them.

-- The lock is `worker`'s in `queue` (expired but not yet handed over counts).
local function holds(job, worker, queue)
  return job ~= nil and job.state == 'running' and job.worker == worker
    and job.queue == queue
end

-- lanner.complete_many: complete every listed job `worker` still holds in
-- `queue` (data unchanged, no next queue). Returns the jids completed; the
-- others (lock lost, already finished, unknown) are skipped, not errors.
-- What holds and Job.complete look at (state first, as Job.load wants).
local COMPLETE_FIELDS = {
  'state', 'queue', 'worker', 'retries', 'failure', 'time', 'grace', 'lanner_size',
  'history', 'jid',
}

-- Job.load(jid, COMPLETE_FIELDS), made by one table constructor (a table
-- filled field by field is rehashed as it grows, per job).
local function load_for_complete(jid)
  local v = redis.call('hmget', Keys.job(jid), unpack(COMPLETE_FIELDS))
  if not v[1] then
    return nil
  end
  return {
    jid = jid, state = v[1], queue = v[2] or '', worker = v[3] or '', priority = 0,
    retries = tonumber(v[4]), failure = v[5] or nil, time = tonumber(v[6]),
    grace = v[7] or nil, lanner_size = tonumber(v[8]), history = v[9] or nil,
    history_loaded = true, jid_stored = v[10] ~= false,
  }
end

function Lanner.complete_many(now, worker, queue, jids, results)
  local done, released = {}, { completed = {} }
  local options = {}
  local line = Job.entry(now, 'done', nil)
  for _, jid in ipairs(jids) do
    local job = load_for_complete(jid)
    if holds(job, worker, queue) then
      options.result = results and results[jid]
      Job.complete(now, jid, worker, queue, nil, options, job, released, line)
      done[#done + 1] = jid
    end
  end
  -- The locks given up, and the jobs into ql:completed, in one command per
  -- key rather than one or two per job.
  call_spread('zrem', Keys.queue(queue, 'locks'), released, 1000)
  call_spread('zrem', Keys.worker_jobs(worker), released, 1000)
  Job.add_completed(now, released.completed)
  return done
end

-- lanner.heartbeat_many: renew every lock `worker` holds among `jids`, in
-- whatever queue (one that ran out but was not yet handed over counts), as
-- heartbeat would. Returns {jid, expiry as text, ...} for those renewed; the
-- others (lock lost, finished, cancelled, unknown) are skipped, not errors.
-- What Job.renew looks at (state first, as Job.load wants).
local HEARTBEAT_FIELDS = { 'state', 'queue', 'worker', 'grace' }

function Lanner.heartbeat_many(now, worker, jids)
  local reply, renewed = {}, {}
  for _, jid in ipairs(jids) do
    local job = Job.load(jid, HEARTBEAT_FIELDS)
    if job ~= nil and job.state == 'running' and job.worker == worker then
      reply[#reply + 1] = jid
      reply[#reply + 1] = Num.str(Job.renew(now, job, worker, nil, renewed))
    end
  end
  if #reply == 0 then
    return reply
  end
  -- The locks renewed, in one command per key rather than two per job.
  local held = {}
  for _, queue in ipairs(renewed) do
    local locks = renewed[queue]
    call_spread('zadd', Keys.queue(queue, 'locks'), locks, 1000)
    for index = 1, #locks do
      held[#held + 1] = locks[index]
    end
  end
  call_spread('zadd', Keys.worker_jobs(worker), held, 1000)
  Worker.seen(now, worker)
  return reply
end

-- lanner.release / lanner.release_in: give back jobs `worker` popped from
-- `queue` but will not run (it is shutting down, or cannot finish before the
-- lock runs out), without spending a retry, with a `released` {worker}
-- history entry. With delay <= 0 each is waiting again in its place from
-- before the pop (its ready time, kept in `ready`, and its sequence number),
-- otherwise scheduled `delay` seconds ahead. With `spend` (lanner.release_tried:
-- the job was tried, by a worker that died running it) one retry of each is
-- spent. Returns the jids released; the others are skipped.
function Lanner.release(now, worker, queue, delay, jids, spend)
  -- The releaser is not waiting for these jobs: a supervisor releasing for a
  -- worker that died while its pop thread was blocked (a process running many
  -- jobs at once) would otherwise hand them straight back to the dead worker,
  -- where they would wait for their locks to run out.
  stop_waiting(queue, worker)
  local released = {}
  local ready = 0
  for _, jid in ipairs(jids) do
    local job = Job.load(jid)
    if holds(job, worker, queue) then
      local key = Keys.job(jid)
      redis.call('zrem', Keys.queue(queue, 'locks'), jid)
      Worker.release(worker, jid)
      redis.call('hdel', key, 'grace')
      if spend and job.remaining > 0 then
        redis.call('hset', key, 'remaining', job.remaining - 1)
      end
      if not spend then
        Flow.unstarted(jid) -- its run did not start: its counted start is free again
      end
      if delay > 0 then
        local due = now + delay
        redis.call('hmset', key, 'state', 'scheduled', 'worker', '', 'expires', 0, 'time', due)
        redis.call('zadd', Keys.queue(queue, 'scheduled'), due, jid)
      else
        local at = redis.call('hget', key, 'ready') or now
        redis.call('hmset', key, 'state', 'waiting', 'worker', '', 'expires', 0, 'time', at)
        Queue.place(queue, jid)
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

-- lanner.peek: the jobs pop would give next, in pop order, without changing
-- anything (qless's peek spawns recurring runs and promotes scheduled jobs):
-- expired locks by expiry, then jobs stalled by timeout, then ready jobs and
-- due scheduled jobs together in order (a due job ranks as if promoted at its
-- due time). Ignores pause and max-concurrency, like peek, and leaves out
-- the jobs pop would drop as expired (LIMITS). Returns jids.

-- A job's order (Queue.order), and its expires_at or nil.
local function peek_order(jid)
  local values = redis.call('hmget', Keys.job(jid), 'priority', 'time', 'lanner_seq',
    'lanner_expires_at')
  local order = { tonumber(values[1]) or 0, tonumber(values[2]) or 0, tonumber(values[3]) or 0 }
  return order, tonumber(values[4])
end

function Lanner.peek(now, queue, count)
  Limits.register(queue)
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
  -- -work is in order already; a stalled job (+inf) ranks as priority +inf.
  -- Expired jobs are passed over, and more are read in their place.
  local candidates = {}
  local work = Keys.queue(queue, 'work')
  local offset, chunk = 0, want
  while #candidates < want do
    local found = redis.call('zrevrange', work, offset, offset + chunk - 1, 'WITHSCORES')
    for index = 1, #found, 2 do
      local order, expires_at = peek_order(found[index])
      local stalled = tonumber(found[index + 1]) == math.huge
      if stalled then
        order = { math.huge, 0, 0 }
      end
      if stalled or expires_at == nil or expires_at > now then
        candidates[#candidates + 1] = { jid = found[index], order = order, rank = #candidates }
      end
    end
    if #found < 2 * chunk then
      break
    end
    offset = offset + chunk
    chunk = math.max(want - #candidates, 16)
  end
  local ranked = #candidates
  local due = redis.call('zrangebyscore', Keys.queue(queue, 'scheduled'), '-inf', at,
    'WITHSCORES')
  for index = 1, #due, 2 do
    local order, expires_at = peek_order(due[index])
    order[2] = tonumber(due[index + 1])
    if expires_at == nil or expires_at > now then
      candidates[#candidates + 1] = { jid = due[index], order = order, rank = ranked + index }
    end
  end
  table.sort(candidates, function(a, b)
    if Queue.ahead(a.order, b.order) then
      return true
    elseif Queue.ahead(b.order, a.order) then
      return false
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
