-------------------------------------------------------------------------------
-- limits.lua: Kestrel's bounded queues (LIMITS) and fanout queues (FANOUT).
-------------------------------------------------------------------------------
-- Bounds are settings in ql:config (Config.limits); what a queue holds
-- against them is counted in ql:lanner:usage:<queue>. Its items are not
-- counted there: they are the jobs in the queue's -work, -scheduled, -locks
-- and -depends, whose sizes Redis keeps. Its bytes are: each job that enters
-- a queue (put, advance, unfail, spawn) adds the bytes of its data and keeps
-- that number in its hash (lanner_size); whatever takes it out of the queue
-- (complete, fail, a move, cancel, a drop) subtracts exactly that number, so
-- the count cannot drift with the data a heartbeat or a failure rewrites.
-- Only live jobs (LIVE) count: leaving means leaving a live state.

-- The counters of ql:lanner:usage:<queue>: bytes, total (jobs that entered),
-- expired, discarded, and children: how many children the queue has in its
-- set of children (kept with the set), so that a put into a queue without
-- any need not read the set.
local USAGE_FIELDS = { 'bytes', 'total', 'expired', 'discarded', 'children' }
local BYTES, TOTAL, CHILDREN = 1, 2, 5
local COUNTER = { expired = 3, discarded = 4 }

-- What this call changes of each queue's counters, written when the command
-- ends (Limits.flush): queue -> { the changes of the five counters, then
-- their stored values once read }. A put reads the hash of its queue (for
-- its children and bounds), whose counters are then written back in one
-- HSET; the others' changes go by HINCRBY, without a read. A batch of puts
-- into one queue thus costs two commands, not two per job. (Every table a
-- call makes costs again in Lua's garbage collector, whose work grows with
-- the whole library: a put makes as few as it can, and nothing is made for
-- a call that changes no counter.)
local usage
-- Children of each fanout parent read in this call (parent -> sorted list;
-- a queue without children is not remembered: its counter says so).
local children_memo
per_call(function()
  usage, children_memo = nil, nil
end)

local NO_CHILDREN = {}

local function changes(queue)
  if usage == nil then
    usage = {}
  end
  local found = usage[queue]
  if found == nil then
    found = { 0, 0, 0, 0, 0 }
    usage[queue] = found
  end
  return found
end

-- The queue's counters as stored, read once per call into found[6..10], and
-- its marks `fractional` into found[11] (see Limits.fractional) and `listed`
-- into found[12] (see Limits.listed), `waiting` into found[13] (see
-- Limits.may_wait) and `seq` into found[14] (see Limits.next_seq; found[15]
-- is the last one this call gave).
local function read_usage(queue, found)
  if found[6] == nil then
    local values = redis.call('hmget', Keys.usage(queue), 'bytes', 'total', 'expired',
      'discarded', 'children', 'fractional', 'listed', 'waiting', 'seq')
    for field = 1, 5 do
      found[field + 5] = tonumber(values[field]) or 0
    end
    found[11], found[12], found[13] = values[6] ~= false, values[7] ~= false, tonumber(values[8])
    found[14] = tonumber(values[9])
  end
  return found
end

-- The queue's next sequence number (Queue.next_seq), written back with its
-- counters when the command ends. A queue without a count of its own yet
-- starts after the last number of the store's one counter, ql:lanner:seq,
-- which lanner versions before per-queue counts gave to every job.
function Limits.next_seq(queue)
  local found = read_usage(queue, changes(queue))
  local last = found[15] or found[14]
  if last == nil then
    last = tonumber(redis.call('get', Keys.seq)) or 0
  end
  found[15] = last + 1
  return last + 1
end

-- Whether a worker may be registered in ql:lanner:waiting:<queue> to wait
-- till `now` or later, as far as this call knows without asking: the field
-- `waiting` of the usage hash is the latest end of any registration made
-- (lanner.pop_wait raises it; nothing lowers it), so when it is earlier, or
-- missing, nobody is (a put reads the hash anyway: its hand-off then asks
-- nothing). Registrations made by an older lanner do not raise it: their
-- workers are woken by the wake-up token instead of handed their jobs.
function Limits.may_wait(queue, now)
  local found = usage and usage[queue]
  if found == nil or found[6] == nil then
    return true
  end
  return found[13] ~= nil and found[13] >= now
end

-- A worker registered to wait on the queue till `till`.
function Limits.waits_until(queue, till)
  local found = read_usage(queue, changes(queue))
  if found[13] == nil or found[13] < till then
    redis.call('hset', Keys.usage(queue), 'waiting', Num.str(till))
    found[13] = till
  end
end

-- A counter as this call leaves it (the hash is read once per call).
local function counter(queue, index)
  local found = read_usage(queue, changes(queue))
  return found[index + 5] + found[index]
end

-- Whether a job of a fractional priority was ever placed in the queue's
-- -work (field `fractional`, set once and kept): Queue.place then reads the
-- last job's order instead of trusting its score. Read with the counters.
function Limits.fractional(queue)
  return read_usage(queue, changes(queue))[11]
end

-- Whether the queue is known to be in ql:queues without asking it: its usage
-- hash, read in this call already (a put reads it), says so (field `listed`,
-- set by Queue.remember once it has seen the queue there, taken away by
-- Queue.forget with the queue). Queue.remember then makes no ZSCORE.
function Limits.listed(queue)
  local found = usage and usage[queue]
  return found ~= nil and found[12] == true
end

-- Queue.remember saw the queue in ql:queues (or added it): said in the usage
-- hash, if this call read it (else the next put's call does).
function Limits.mark_listed(queue)
  local found = usage and usage[queue]
  if found ~= nil and found[6] ~= nil and not found[12] then
    redis.call('hset', Keys.usage(queue), 'listed', 1)
    found[12] = true
  end
end

-- Queue.forget took the queue out of ql:queues.
function Limits.unlisted(queue)
  redis.call('hdel', Keys.usage(queue), 'listed')
  local found = usage and usage[queue]
  if found ~= nil and found[6] ~= nil then
    found[12] = false
  end
end

function Limits.mark_fractional(queue)
  local found = read_usage(queue, changes(queue))
  if not found[11] then
    redis.call('hset', Keys.usage(queue), 'fractional', 1)
    found[11] = true
  end
end

-- A job of `size` bytes of data entered the queue.
function Limits.entered(queue, size)
  local found = changes(queue)
  found[BYTES] = found[BYTES] + size
  found[TOTAL] = found[TOTAL] + 1
end

-- A live job left the queue; `size` is its lanner_size (nil for a job stored
-- before lanner counted bytes, which counts none).
function Limits.left(queue, size)
  if size ~= nil and size ~= 0 then
    local found = changes(queue)
    found[BYTES] = found[BYTES] - size
  end
end

-- One more job 'expired' or 'discarded'.
function Limits.count(queue, name)
  local found = changes(queue)
  local index = COUNTER[name]
  found[index] = found[index] + 1
end

-- (The order in which queues are written makes no difference.)
function Limits.flush()
  if usage == nil then
    return
  end
  for queue, found in pairs(usage) do
    local key = Keys.usage(queue)
    if found[6] == nil then
      for index = 1, 5 do
        if found[index] ~= 0 then
          redis.call('hincrby', key, USAGE_FIELDS[index], found[index])
        end
      end
    elseif found[3] == 0 and found[4] == 0 and found[5] == 0 then
      -- What a put changes (no table for the arguments).
      local seq = found[15]
      if seq == nil then
        if found[TOTAL] ~= 0 then
          redis.call('hset', key, 'bytes', found[6] + found[BYTES], 'total', found[7] + found[TOTAL])
        elseif found[BYTES] ~= 0 then
          redis.call('hset', key, 'bytes', found[6] + found[BYTES])
        end
      elseif found[TOTAL] ~= 0 then
        redis.call('hset', key, 'bytes', found[6] + found[BYTES], 'total', found[7] + found[TOTAL],
          'seq', seq)
      elseif found[BYTES] ~= 0 then
        redis.call('hset', key, 'bytes', found[6] + found[BYTES], 'seq', seq)
      else
        redis.call('hset', key, 'seq', seq)
      end
    else
      local fields = {}
      for index = 1, 5 do
        if found[index] ~= 0 then
          fields[#fields + 1], fields[#fields + 2] = USAGE_FIELDS[index],
            found[index + 5] + found[index]
        end
      end
      if found[15] ~= nil then
        fields[#fields + 1], fields[#fields + 2] = 'seq', found[15]
      end
      if #fields > 0 then
        redis.call('hset', key, unpack(fields))
      end
    end
  end
  usage = nil
end

function Limits.bytes(queue)
  return counter(queue, BYTES)
end

function Limits.items(queue)
  local items = 0
  for _, kind in ipairs({ 'work', 'scheduled', 'locks', 'depends' }) do
    items = items + redis.call('zcard', Keys.queue(queue, kind))
  end
  return items
end

-- lanner.usage: { items, bytes, total, expired, discarded }.
function Limits.usage(queue)
  local stored = redis.call('hmget', Keys.usage(queue), 'bytes', 'total', 'expired', 'discarded')
  local reply = { Limits.items(queue) }
  for index = 1, 4 do
    reply[index + 1] = tonumber(stored[index]) or 0
  end
  return reply
end

-- The expires_at a job put into `queue` gets: the one asked for (or nil),
-- no later than now + the queue's max-age.
function Limits.expiry(now, queue, expires_at)
  local bounds = Config.limits(queue)
  if bounds and bounds.age then
    local latest = now + bounds.age
    if expires_at == nil or expires_at > latest then
      return latest
    end
  end
  return expires_at
end

-- Delete a waiting job (loaded whole), as cancel would, counting it as
-- `counter` (expired or discarded) in its queue. Jobs that depend on it stop
-- waiting for it, as for a dependency that does not exist.
function Limits.drop(now, job, counter)
  local jid = job.jid
  Job.unplace(now, job)
  Job.release_dependents(now, jid)
  Events.log({ 'jid', jid, 'queue', job.queue, 'event', counter })
  Events.tracked(jid, 'canceled')
  redis.call('zrem', Keys.tracked, jid)
  Job.delete(jid)
  Limits.count(job.queue, counter)
end

-------------------------------------------------------------------------------
-- Fanout
-------------------------------------------------------------------------------
-- ql:lanner:children:<parent> is the set of children <child> of a parent
-- queue: a pop or peek of <parent>+<child> adds it, queue.forget of that
-- queue removes it. Names are only ever concatenated into keys, never used
-- as patterns, so the '+' needs no escaping.

-- parent, child of a queue named <parent>+<child>; nil for any other name.
local function split_child(queue)
  local plus = string.find(queue, '+', 1, true)
  if plus == nil or plus == 1 or plus == #queue then
    return nil
  end
  return string.sub(queue, 1, plus - 1), string.sub(queue, plus + 1)
end

-- The children a put into `queue` copies its job to, in name order. A child
-- has none: a put into it reaches only itself.
function Limits.children(queue)
  local children = children_memo and children_memo[queue]
  if children ~= nil then
    return children
  elseif string.find(queue, '+', 1, true) or counter(queue, CHILDREN) <= 0 then
    return NO_CHILDREN
  end
  children = redis.call('smembers', Keys.children(queue))
  table.sort(children)
  children_memo = children_memo or {}
  children_memo[queue] = children
  return children
end

-- The queue was popped or peeked: a child is registered with its parent.
function Limits.register(queue)
  local parent, child = split_child(queue)
  if parent ~= nil and redis.call('sadd', Keys.children(parent), child) == 1 then
    local found = changes(parent)
    found[CHILDREN] = found[CHILDREN] + 1
    if children_memo then
      children_memo[parent] = nil
    end
  end
end

function Limits.unregister(queue)
  local parent, child = split_child(queue)
  if parent ~= nil and redis.call('srem', Keys.children(parent), child) == 1 then
    local found = changes(parent)
    found[CHILDREN] = found[CHILDREN] - 1
    if children_memo then
      children_memo[parent] = nil
    end
  end
end

-------------------------------------------------------------------------------
-- Putting under bounds, and fanning out
-------------------------------------------------------------------------------
-- put, requeue and lanner.put_many go through Limits.put. Each put into a
-- parent is followed by a copy into each of its children: jid <jid>+<child>
-- into <parent>+<child>, with the put's klass, data, delay, priority, tags,
-- retries, if_exists and expires_at (the child's max-age caps it), without
-- depends. Where a queue bounds its items, bytes or item size, every put of
-- the call is checked first, against the queue as the puts before it leave
-- it (Redis cannot undo writes: a refusal must come before any): a put whose
-- data is over max-item-size, or that would take the queue over max-items or
-- max-size, is refused with an error unless the queue discards old jobs when
-- full; then its oldest waiting jobs (the front of -work, then the waiting
-- jobs the call itself put, in put order) are dropped to make room, and only
-- if dropping all of them is not enough is the put refused. A copy is never
-- refused: a copy its child turns away is dropped, counted discarded there.

-- Each put of `puts`, and right behind it its copies (`puts` itself when no
-- queue put into has children).
local function with_copies(puts)
  local any = false
  for _, p in ipairs(puts) do
    if #Limits.children(p.queue) > 0 then
      any = true
      break
    end
  end
  if not any then
    return puts
  end
  local entries = {}
  for _, p in ipairs(puts) do
    entries[#entries + 1] = p
    for _, child in ipairs(Limits.children(p.queue)) do
      local options = {}
      for key, value in pairs(p.options) do
        if key ~= 'depends' then
          options[key] = value
        end
      end
      entries[#entries + 1] = {
        worker = p.worker, queue = p.queue .. '+' .. child, jid = p.jid .. '+' .. child,
        klass = p.klass, data = p.data, delay = p.delay, options = options, copy_of = p,
      }
    end
  end
  return entries
end

-- Whether a put into the queue must be checked before it is made.
local function checked(queue)
  local bounds = Config.limits(queue)
  return bounds and (bounds.items or bounds.size or bounds.item_size) and true or false
end

local function refuse_size(queue, size, bound)
  raise("Payload too large: %d bytes of data, over the max-item-size %s of queue '%s'",
    size, Num.str(bound), queue)
end

local function refuse_full(queue, bound, value)
  raise("Queue full: '%s' is at its %s (%s)", queue, bound, Num.str(value))
end

-- Decide every put of `entries` before any is made, reading only: raises the
-- refusal of a put, and marks each entry: `kept` (if_exists keep found its
-- job live), `skipped` (a copy of a kept put, or one whose job is running
-- and may not be moved), `dropped` (a copy its child turns away), or else
-- `drops`, the jobs {jid, size} to drop before it is made.
local function plan(entries)
  local queues, jobs = {}, {}

  -- A queue that bounds its items or bytes, as the puts so far leave it:
  -- items and bytes, `cursor` (the rank in the stored -work of the next job
  -- that may be dropped; jobs stalled by timeout, at +inf, are never
  -- dropped), `gone` (stored jobs the puts moved or dropped), `added` (the
  -- waiting jobs the puts made, in put order) and `next_added`. Nil for a
  -- queue without such bounds.
  local function queue_state(queue)
    local state = queues[queue]
    if state == nil then
      state = false
      local bounds = Config.limits(queue)
      if bounds and (bounds.items or bounds.size) then
        state = {
          queue = queue, bounds = bounds,
          items = Limits.items(queue), bytes = Limits.bytes(queue),
          cursor = redis.call('zcount', Keys.queue(queue, 'work'), '+inf', '+inf'),
          gone = {}, added = {}, next_added = 1,
        }
      end
      queues[queue] = state
    end
    return state or nil
  end

  -- A jid's job as the puts so far leave it: { live, state, queue, size,
  -- added (its entry in its queue's `added`) }, or nil. A job the puts made
  -- is in state 'waiting', or 'pending' when it may not be (delayed or
  -- depending): only the first may be dropped.
  local function job_of(jid)
    local job = jobs[jid]
    if job == nil then
      local values = redis.call('hmget', Keys.job(jid), 'state', 'queue', 'lanner_size', 'jid')
      job = false
      if values[1] then
        job = {
          live = LIVE[values[1]] == true, state = values[1],
          queue = present(values[2]) or '', size = Job.counted(jid, values[3], values[4]),
        }
      end
      jobs[jid] = job
    end
    return job or nil
  end

  -- Whether a job of `size` bytes fits into the queue once `leaving` (the
  -- put's own job, if live in this queue) is out, dropping old waiting jobs
  -- if the queue may: true, the drops, the cursor and next_added after them;
  -- or false and the bound exceeded. Changes nothing.
  local function fit(state, jid, leaving, size)
    local bounds = state.bounds
    local items, bytes = state.items + 1, state.bytes + size
    if leaving ~= nil then
      items, bytes = items - 1, bytes - leaving.size
    end
    local function exceeded()
      if bounds.items and items > bounds.items then
        return 'max-items', bounds.items
      elseif bounds.size and bytes > bounds.size then
        return 'max-size', bounds.size
      end
      return nil
    end
    local bound, value = exceeded()
    local drops = {}
    if bound == nil then
      return true, drops, state.cursor, state.next_added
    elseif not bounds.discard then
      return false, bound, value
    end
    local work = Keys.queue(state.queue, 'work')
    local cursor, next_added = state.cursor, state.next_added
    while bound ~= nil do
      local drop
      local member = redis.call('zrevrange', work, cursor, cursor)[1]
      if member ~= nil then
        cursor = cursor + 1
        if member ~= jid and not state.gone[member] then
          local stored = redis.call('hmget', Keys.job(member), 'lanner_size', 'jid')
          drop = { jid = member, size = Job.counted(member, stored[1], stored[2]) }
        end
      else
        local added = state.added[next_added]
        if added == nil then
          return false, bound, value
        end
        next_added = next_added + 1
        if not added.removed and added.jid ~= jid then
          drop = added
        end
      end
      if drop ~= nil then
        drops[#drops + 1] = drop
        items, bytes = items - 1, bytes - drop.size
        bound, value = exceeded()
      end
    end
    return true, drops, cursor, next_added
  end

  local function decide(entry, old)
    local size = #entry.data
    local bounds = Config.limits(entry.queue)
    local copy = entry.copy_of ~= nil
    if bounds and bounds.item_size and size > bounds.item_size then
      if not copy then
        refuse_size(entry.queue, size, bounds.item_size)
      end
      entry.dropped = true
      return
    end
    local state = queue_state(entry.queue)
    local drops = {}
    if state ~= nil then
      local leaving = old and old.live and old.queue == entry.queue and old or nil
      local fits, found, cursor, next_added = fit(state, entry.jid, leaving, size)
      if not fits then
        if not copy then
          refuse_full(entry.queue, found, cursor) -- (the bound and its value)
        end
        entry.dropped = true
        return
      end
      drops = found
      state.cursor, state.next_added = cursor, next_added
    end
    -- The put is made: it takes its job out of its old place, drops, enters.
    if old and old.live then
      local old_state = queue_state(old.queue)
      if old_state ~= nil then
        old_state.items, old_state.bytes = old_state.items - 1, old_state.bytes - old.size
        old_state.gone[entry.jid] = true
        if old.added then
          old.added.removed = true
        end
      end
    end
    for _, drop in ipairs(drops) do
      state.items, state.bytes = state.items - 1, state.bytes - drop.size
      state.gone[drop.jid] = true
      drop.removed = true
      jobs[drop.jid] = false
    end
    -- Whether it surely ends up waiting, so that a later put may drop it: not
    -- delayed, and given no dependency, or keeping none (a moved job keeps
    -- its dependencies unless given some, and only a job in depends has any).
    local depends = entry.options.depends
    local waiting = entry.delay <= 0
    if depends ~= nil then
      waiting = waiting and #depends == 0
    elseif old ~= nil and (old.state == 'depends' or old.state == 'pending') then
      waiting = false
    end
    local added
    if state ~= nil then
      state.items, state.bytes = state.items + 1, state.bytes + size
      if waiting then
        added = { jid = entry.jid, size = size }
        state.added[#state.added + 1] = added
      end
    end
    jobs[entry.jid] = {
      live = true, state = waiting and 'waiting' or 'pending', queue = entry.queue, size = size,
      added = added,
    }
    entry.drops = drops
  end

  for _, entry in ipairs(entries) do
    local parent = entry.copy_of
    if parent ~= nil and parent.kept then
      entry.skipped = true
    else
      local old = job_of(entry.jid)
      local if_exists = entry.options.if_exists
      if old and (old.live and if_exists == 'keep' or if_exists == 'once'
          or if_exists == 'keep-waiting' and old.live and old.state ~= 'running'
            and old.state ~= 'stalled') then
        entry.kept = true
      elseif parent ~= nil and old and if_exists == 'move-unless-running'
          and (old.state == 'running' or old.state == 'stalled') then
        entry.skipped = true
      else
        decide(entry, old)
      end
    end
  end
end

-- Make one put of the entries, as planned. Returns the jid (nil for a copy
-- not made).
local function make(now, entry)
  local parent = entry.copy_of
  if parent ~= nil then
    if parent.kept or entry.skipped then
      return nil
    elseif entry.dropped then
      Limits.count(entry.queue, 'discarded')
      return nil
    elseif entry.options.if_exists == 'move-unless-running' then
      -- Unplanned copies meet this here: a copy is never refused.
      local state = present(redis.call('hget', Keys.job(entry.jid), 'state'))
      if state == 'running' or state == 'stalled' then
        return nil
      end
    end
  end
  if entry.drops ~= nil then
    for _, drop in ipairs(entry.drops) do
      local job = Job.load(drop.jid)
      if job ~= nil and job.state == 'waiting' and job.queue == entry.queue then
        Limits.drop(now, job, 'discarded')
      end
    end
  end
  local jid, kept = Queue.put(now, entry.worker, entry.queue, entry.jid, entry.klass, entry.data,
    entry.delay, entry.options, nil)
  entry.kept = kept
  return jid
end

-- put and requeue: one put, which mostly has no copies to make and no
-- bounds to check: then it is made as it comes.
function Limits.put_one(now, p)
  if #Limits.children(p.queue) == 0 and not checked(p.queue) then
    Queue.put(now, p.worker, p.queue, p.jid, p.klass, p.data, p.delay, p.options, nil)
  else
    Limits.put(now, { p }, false)
  end
  return p.jid
end

-- put, requeue (one put) and lanner.put_many (`batch`): the jids put.
function Limits.put(now, puts, batch)
  -- All or none: a job that may not be moved stops the call before any write
  -- (a drop to make room for it included).
  for _, p in ipairs(puts) do
    if p.options.if_exists == 'move-unless-running' or p.options.if_exists == 'keep-waiting' then
      Queue.kept_or_refused(p.jid, p.options.if_exists)
    end
  end
  local entries = with_copies(puts)
  for _, entry in ipairs(entries) do
    if checked(entry.queue) then
      plan(entries)
      break
    end
  end
  if batch then
    Queue.put_many(now, entries, make)
  else
    for _, entry in ipairs(entries) do
      make(now, entry)
    end
  end
  local jids = {}
  for index, p in ipairs(puts) do
    jids[index] = p.jid
  end
  return jids
end
