-------------------------------------------------------------------------------
-- put.lua: putting jobs into queues (Queue.put: put and requeue; Queue.put_many).
-------------------------------------------------------------------------------
-- A put writes the job's hash in one HMSET and places a waiting job in -work
-- (queue.lua's order).

-------------------------------------------------------------------------------
-- Putting jobs in
-------------------------------------------------------------------------------
-- Place a job whose hash is otherwise up to date into `queue`: depends if it
-- still waits on another job, else scheduled if delayed, else waiting.
-- Writes state and time (when it became ready) and returns the state. The job
-- takes a new sequence number unless `keep_seq` (a dependency release).
-- `put` (from Queue.put) carries the hash fields the put writes, stored in the
-- same HMSET, the job's priority, and whether it is known to wait for nothing
-- (`independent`), and a new job's history (its put entry, stored last unless
-- `implied` and the job is waiting); the put has already cleared `scheduled`.
function Queue.enqueue(now, queue, jid, delay, keep_seq, put)
  local key = Keys.job(jid)
  local fields = put and put.fields or {}
  local seq
  if not keep_seq then
    seq = Queue.next_seq(queue)
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
  -- A new job put straight into waiting has its put entry implied by its
  -- `time` (job.lua, History); others keep it short here.
  if put ~= nil and put.history ~= nil and not (state == 'waiting' and put.implied) then
    fields[#fields + 1], fields[#fields + 2] = 'history', put.history
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
  -- leaves it, which gives back exactly this (Job.size: lanner_size, which
  -- a new job leaves out while it is its data's length).
  local size = #data
  Limits.entered(queue, size)
  -- A new hash keeps its fields in this order, and HMGET finds those at the
  -- front soonest. A new job stores no field whose value is its default,
  -- which Job.load and Job.object give back (jid: the key's; worker: '';
  -- expires, priority: 0; tags: none; they read no other way in older
  -- lanner versions either), nor what it can be told from (lanner_size: the
  -- length of data; a history implied by its time: job.lua): fewer bytes,
  -- and a hash small enough stays in Redis' compact encoding (listpack: at
  -- most 128 fields of at most 64 bytes by default). A move overwrites what
  -- the old job had.
  local fields = { 'klass', klass, 'data', data }
  if old ~= nil then
    fields[#fields + 1], fields[#fields + 2] = 'lanner_size', size
  end
  if old ~= nil or priority ~= 0 then
    fields[#fields + 1], fields[#fields + 2] = 'priority', priority
  end
  if old ~= nil or #tags > 0 then
    fields[#fields + 1], fields[#fields + 2] = 'tags', Json.array(tags)
  end
  fields[#fields + 1], fields[#fields + 2] = 'queue', queue
  if old ~= nil then
    fields[#fields + 1], fields[#fields + 2] = 'worker', ''
    fields[#fields + 1], fields[#fields + 2] = 'expires', 0
  end
  fields[#fields + 1], fields[#fields + 2] = 'retries', retries
  -- (`remaining` is stored even when equal to retries: a process of an older
  -- lanner, sharing the store during an upgrade, pops a job by it.)
  fields[#fields + 1], fields[#fields + 2] = 'remaining', retries
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
  -- A new job's history is this one entry, stored with the rest of its hash.
  local history
  if old == nil then
    history = Job.put_entry(now)
  else
    Job.record(now, jid, 'put', { q = queue })
  end
  -- A new job given no dependencies has none (a job's sets go with its hash).
  local independent = old == nil and (options.depends == nil or #options.depends == 0)
  local state = Queue.enqueue(now, queue, jid, delay, false,
    { fields = fields, priority = priority, independent = independent, history = history,
      implied = options.flow == nil })
  Job.put_in_call(jid)
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

-- Many puts in one call (lanner.put_many): each job's order is remembered for
-- placing the next; and when none of the jobs exists yet (the usual case),
-- one EXISTS tells, instead of a look per put. `put(now, p)` does one put of
-- the list.
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
  known_orders, known_tails = {}, {}
  local results = {}
  for index, p in ipairs(puts) do
    results[index] = put(now, p)
  end
  Queue.flush()
  known_orders, known_tails, fresh_jids = nil, nil, nil
  return results
end
