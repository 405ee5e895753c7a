-------------------------------------------------------------------------------
-- pop.lua: what becomes due, and handing jobs out: pop, peek.
-------------------------------------------------------------------------------

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
-- `batch` (pop's jobs from -work, see new_batch): the -work, -locks and
-- worker zset updates are collected there and made by flush_locks, one
-- command per key; what is the same for every job of the batch (the lock's
-- expiry, the times as text, the history entry) is worked out once there.
-- A job from -work keeps its `remaining` (only a lock taken over spends one);
-- its `ready` is the text of its `time` as loaded (job.time_text, when known).
local function lock(now, queue, worker, job, from_work, batch, start)
  local jid = job.jid
  local expires, fields
  if batch then
    expires = batch.expires
    fields = { 'state', 'running', 'worker', worker, 'expires', batch.expires_text,
      'time', batch.now_text, nil, nil, nil, nil, nil, nil } -- (room for 3 fields)
  else
    expires = now + Config.heartbeat(queue)
    fields = { 'state', 'running', 'worker', worker, 'expires', expires, 'time', now,
      'remaining', job.remaining }
  end
  if not job.jid_stored then
    if job.lanner_size == nil then
      -- A new job's counted bytes (its data's length: Job.size), stored while
      -- it runs: its completion then need not read its data.
      job.lanner_size = #job.data
      fields[#fields + 1], fields[#fields + 2] = 'lanner_size', job.lanner_size
    end
    if job.history_loaded and job.history ~= '' then
      -- Its history is all in the list from this pop's entry on (Job.record).
      fields[#fields + 1], fields[#fields + 2] = 'history', ''
      job.history_marked = true
    end
  end
  if from_work then
    if batch then
      batch.work[#batch.work + 1] = jid
    else
      redis.call('zrem', Keys.queue(queue, 'work'), jid)
    end
    if job.time ~= nil then
      Stats.record('wait', queue, now, now - job.time)
      -- Kept so lanner.release can put the job back in its old place.
      fields[#fields + 1], fields[#fields + 2] = 'ready', job.time_text or job.time
    end
  else
    Worker.release(job.worker, jid)
  end
  if batch then
    local locks = batch.locks
    locks[#locks + 1], locks[#locks + 2] = batch.expires_text, jid
  else
    redis.call('zadd', Keys.queue(queue, 'locks'), expires, jid)
    Worker.hold(worker, jid, expires)
  end
  redis.call('hmset', Keys.job(jid), unpack(fields))
  if job.grace ~= nil then
    redis.call('hdel', Keys.job(jid), 'grace')
  end
  if start then
    local entry = { worker = worker }
    entry.start, entry.by = start.start, start.by
    Job.record(now, jid, 'popped', entry, job)
  elseif batch then
    batch.line = batch.line or Job.entry(now, 'popped', { worker = worker })
    Job.record(now, jid, 'popped', nil, job, batch.line)
  else
    Job.record(now, jid, 'popped', { worker = worker }, job)
  end
  Events.tracked(jid, 'popped')
  -- The job as it now stands, for the reply (see object_texts).
  job.state, job.worker, job.expires, job.time, job.grace = 'running', worker, expires, now, nil
end

-- A batch of jobs from -work popped for `worker` at `now` (see lock).
local function new_batch(now, queue)
  local expires = now + Config.heartbeat(queue)
  return { work = {}, locks = {}, expires = expires, expires_text = Num.str(expires),
    now_text = Num.str(now) }
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
  local limit = Config.max_concurrency(queue)
  if limit <= 0 then
    return nil
  end
  local running = redis.call('zcount', Keys.queue(queue, 'locks'), '(' .. Num.str(now), '+inf')
  return math.max(0, limit - running)
end

-------------------------------------------------------------------------------
-- Pop's reply, as JSON text
-------------------------------------------------------------------------------
-- A popped job goes back as the JSON text of Job.object(job), written here
-- piece by piece: its history entries are put in as stored (each is an
-- object's JSON text, written by cjson) instead of decoded into tables and
-- encoded again, and the values a batch repeats (state, queue, worker,
-- klass, the lock's expiry, priority, retries) are encoded once per call.
-- The same object (cjson's key order was never defined); an empty list or
-- object is {}, as cjson writes it.
local encoded_texts
per_call(function()
  encoded_texts = nil
end)

local function encoded(text)
  encoded_texts = encoded_texts or {}
  local found = encoded_texts[text]
  if found == nil then
    found = cjson.encode(text)
    encoded_texts[text] = found
  end
  return found
end

-- A stored JSON field (tags, failure) as Job.object gives it (Json.decode).
local function decoded_field(value)
  if value == nil or value == false or value == '' or value == '[]' then
    return '{}'
  end
  return cjson.encode(cjson.decode(value))
end

local function members_text(key)
  local members = redis.call('smembers', key)
  if #members == 0 then
    return '{}'
  end
  return cjson.encode(members)
end

-- cjson.encode(Job.object(job)), in the order of Job.object's fields (a job
-- without klass, state, retries, remaining or data: as cjson writes it).
-- `waited`: the job was taken from -work, which holds no job with
-- dependencies (only a job in depends has any: every way into -work, and
-- into scheduled before it, goes through Queue.enqueue's check or a release
-- that found none left), so its empty set is not looked up.
function Job.object_text(job, waited)
  local klass, state, retries, remaining, data = job.klass, job.state, job.retries,
    job.remaining, job.data
  if klass == nil or state == nil or retries == nil or remaining == nil or data == nil then
    return cjson.encode(Job.object(job))
  end
  local jid = job.jid
  local lines = Job.history_lines(jid)
  return '{"jid":' .. cjson.encode(jid) .. ',"klass":' .. encoded(klass)
    .. ',"state":' .. encoded(state) .. ',"queue":' .. encoded(job.queue)
    .. ',"worker":' .. encoded(job.worker) .. ',"priority":' .. encoded(job.priority)
    .. ',"expires":' .. encoded(job.expires or 0) .. ',"retries":' .. encoded(retries)
    .. ',"remaining":' .. encoded(remaining) .. ',"data":' .. cjson.encode(data)
    .. ',"tags":' .. decoded_field(job.tags) .. ',"failure":' .. decoded_field(job.failure)
    .. ',"history":' .. (#lines == 0 and '{}' or '[' .. table.concat(lines, ',') .. ']')
    .. ',"dependencies":' .. (waited and '{}' or members_text(Keys.dependencies(jid)))
    .. ',"dependents":' .. members_text(Keys.dependents(jid))
    .. ',"tracked":' .. (Events.is_tracked(jid) and 'true' or 'false')
    .. ',"spawned_from_jid":' .. (job.spawned_from_jid ~= nil
      and cjson.encode(job.spawned_from_jid) or 'false') .. '}'
end

-- A list of Job.object_text texts as one JSON array ({} when empty).
function Job.texts_array(texts)
  if #texts == 0 then
    return '{}'
  end
  return '[' .. table.concat(texts, ',') .. ']'
end

-- The reply's texts for the jids pop took. `locked` maps a jid to its job
-- table as lock left it: the hash need not be read back.
local function object_texts(jids, locked)
  local result = {}
  for _, jid in ipairs(jids) do
    local job = locked[jid]
    if job ~= nil then
      result[#result + 1] = Job.object_text(job, true)
    else
      job = Job.load(jid)
      if job ~= nil then
        result[#result + 1] = Job.object_text(job, false)
      end
    end
  end
  return result
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

-- What pop reads of a job from -work: JOB_FIELDS (job.lua) but the one it
-- does not use, `state` first, and the job's LIMITS expiry. (Each field
-- asked for costs time: HMGET looks for each one along a small hash, and one
-- the hash does not have, as most have no expiry, costs the whole way: pop
-- asks for one field more than it did before LIMITS, its history field,
-- which spares Job.record a look; and `jid`, which a new job's hash lacks,
-- only to tell an older record (Job.size, and lock's lanner_size and
-- history mark, which such a record does not get).)
local POP_FIELDS = {
  'state', 'klass', 'queue', 'worker', 'priority', 'expires', 'retries', 'remaining',
  'data', 'tags', 'failure', 'spawned_from_jid', 'time', 'grace', 'lanner_expires_at',
  'history', 'jid', 'lanner_size',
}

-- Job.load(jid, POP_FIELDS), made by one table constructor: a table filled
-- field by field grows (and is rehashed) five times, per job. Also the text
-- of its `time` (time_text, for lock's `ready`).
local function load_for_pop(jid)
  local v = redis.call('hmget', Keys.job(jid), unpack(POP_FIELDS))
  if not v[1] then
    return nil
  end
  return {
    jid = jid, state = v[1], klass = v[2] or nil, queue = v[3] or '', worker = v[4] or '',
    priority = tonumber(v[5]) or 0, expires = tonumber(v[6]), retries = tonumber(v[7]),
    remaining = tonumber(v[8]), data = v[9] or nil, tags = v[10] or nil,
    failure = v[11] or nil, spawned_from_jid = v[12] or nil, time = tonumber(v[13]),
    time_text = v[13] or nil, grace = v[14] or nil, lanner_expires_at = tonumber(v[15]),
    history = v[16] or nil, history_loaded = true, jid_stored = v[17] ~= false,
    lanner_size = tonumber(v[18]),
  }
end

-- Whether a job read from -work is a waiting job whose time is up (LIMITS).
-- A stalled job (its lock ran out, or `timeout`) is not: it was handed out.
local function past_expiry(job, now)
  local expires_at = job.lanner_expires_at
  return expires_at ~= nil and expires_at <= now and job.state == 'waiting'
end

-- Lock up to `count` jobs for `worker`: expired locks first, then waiting jobs
-- by score, dropping those past their expiry. Returns their objects, each as
-- JSON text (Job.object_text).
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
  local batch = new_batch(now, queue)
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
        local job = load_for_pop(jid)
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
  return object_texts(taken, locked)
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
