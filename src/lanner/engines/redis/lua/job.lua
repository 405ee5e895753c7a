-------------------------------------------------------------------------------
-- job.lua: the job record (loading, history, tags, leaving a place, dependencies,
-- retention). The commands that act on one job are job_commands.lua's.
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
-- (What pop reads of a job: pop.lua's POP_FIELDS.)
-- JOB_FIELDS and the history field, for complete: its Job.record then needs
-- no look of its own for a short put entry (a popped job has none left).
Job.RECORD_FIELDS = {
  'jid', 'klass', 'state', 'queue', 'worker', 'priority', 'expires', 'retries',
  'remaining', 'data', 'tags', 'failure', 'spawned_from_jid', 'time', 'grace',
  'scheduled', 'lanner_size', 'history',
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

-- Jobs this call has put and not deleted since (Queue.put, Job.delete): a
-- later put of the call that depends on one knows it is live (put leaves it
-- waiting, scheduled or in depends, and nothing within a put completes it)
-- without reading its state. A chord's callback depends on every parent put
-- just before it.
local put_in_call
per_call(function()
  put_in_call = {}
end)

function Job.put_in_call(jid)
  put_in_call[jid] = true
end

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
    if field == 'history' then
      job.history_loaded = true -- (Job.record: its value, or none, is known)
    elseif field == 'jid' then
      job.jid_stored = value ~= false -- (Job.size: a record of an older script)
    end
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

-- The bytes of data the queue of a live job counts for it (Limits): its
-- lanner_size; a job stored without one counts its data's length if put by
-- this script (which stores no `jid` field), else none (a record of qless or
-- of a lanner from before byte counts). From the fields as loaded (given
-- lanner_size, jid and data; or, as `size`, `jid_field` and `data`, the raw
-- HMGET values, false when missing: then data may be left unread).
function Job.size(job)
  return Job.counted(job.jid, job.lanner_size, job.jid_stored, job.data)
end

function Job.counted(jid, size, jid_field, data)
  if size then
    return tonumber(size)
  elseif jid_field then
    return 0
  elseif data then
    return #data
  end
  return redis.call('hstrlen', Keys.job(jid), 'data')
end

function Job.require(jid, fields)
  local job = Job.load(jid, fields)
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
-- Each entry is a JSON object {what, when, ...} in the list ql:j:<jid>-history,
-- capped at max-job-history, always keeping the first entry (how the job came
-- to exist) and dropping the oldest of the rest. But a new job's history, its
-- put entry alone, is not in a list; the hash's field `history` says where
-- it is (in a hash without a `jid` field: jobs stored by older scripts have
-- a list and no such field):
--   * missing: the put entry is implied, {q: its queue, what: 'put', when:
--     its `time`}: a job put straight into waiting (without FLOW). Nothing
--     changes its queue or its `time` before its next entry (pop, a log
--     entry, a move) starts the list with that put entry;
--   * 'p' and the entry's `when` as JSON writes it: the put entry kept short
--     (its `q` is the job's queue), for any other new job (delayed,
--     depending, FLOW: its `time` changes when it comes due), until the next
--     entry moves it to the head of the list;
--   * '' (empty): the history is all in the list.
-- Every change of queue follows an entry (put's move writes its own first;
-- complete, retry and unfail act on a job that was popped or failed, and
-- wrote that). Why: a waiting job without a list of its own is about 250
-- bytes smaller in Redis, and a put one call cheaper; without the `history`
-- field 27 bytes more; and a pop writes both entries in one RPUSH, marking
-- the field in the HMSET that locks the job. (Not the whole history in the
-- hash: a value over 64 bytes turns a hash into a real hash table, more
-- bytes, and a conversion each pop would pay for.) A process of an older
-- lanner sharing the store (an upgrade) reads such a job with an empty
-- history, and adds its entries to the list; the next entry written here
-- puts a short one before them (an implied one is lost once that process
-- has written the first entry). A job of a lanner that deleted the field
-- once its list began (no mark) is taken for one with an implied entry by
-- its next pop here, which finds the list and takes that entry back out.
local PUT_MARK = 112 -- string.byte('p') (no library call at a function library's load)

-- The short form of a put entry, stored by put.lua with a new job's hash.
-- (Every put of a call has the same `now`: its entry is written once.)
local put_entry = {}
-- (Also for Job.record, per call: the head of an expanded put entry by queue,
-- and max-job-history.)
local put_heads, history_limit
per_call(function()
  put_entry.now, put_entry.text = nil, nil
  put_heads, history_limit = nil, nil
end)

function Job.put_entry(now)
  if put_entry.now ~= now then
    put_entry.now, put_entry.text = now, 'p' .. cjson.encode(now)
  end
  return put_entry.text
end

-- A put entry in full from its `when` as JSON writes it and its queue.
local function full_entry(when, queue)
  queue = queue or ''
  put_heads = put_heads or {}
  local head = put_heads[queue]
  if head == nil then
    head = '{"q":' .. cjson.encode(queue) .. ',"what":"put","when":'
    put_heads[queue] = head
  end
  return head .. when .. '}'
end

-- A put entry in full from its short form `text` (nil if it is none).
local function expand(text, queue)
  if not text or string.byte(text, 1) ~= PUT_MARK then
    return nil
  end
  return full_entry(string.sub(text, 2), queue)
end

-- From a job's `history` field, `jid` field (true if stored), `time` and
-- queue: its short put entry in full, or nil; and, without one, its implied
-- put entry, or nil.
local function put_entries(history, jid_stored, time, queue)
  local short = expand(history, queue)
  if short ~= nil or history or jid_stored then
    return short, nil
  end
  time = tonumber(time)
  if time == nil then
    return nil, nil
  end
  return nil, full_entry(cjson.encode(time), queue)
end

local function short_entry(jid)
  local found = redis.call('hmget', Keys.job(jid), 'history', 'queue', 'time', 'jid')
  return put_entries(found[1], found[4], found[3], found[2])
end

-- The history lists this call wrote whole (jid -> their entries' texts):
-- Job.record keeps the entries it pushed when the list held nothing else, so
-- that pop's reply (Job.object) does not read back what it just wrote. Any
-- other write to a history list forgets its jid (Job.forget_history).
local written_history
per_call(function()
  written_history = nil
end)

function Job.forget_history(jid)
  if written_history ~= nil then
    written_history[jid] = nil
  end
end

-- Move a short or implied put entry to the head of the list (before anything
-- else is written to it).
function Job.unshorten_history(jid)
  Job.forget_history(jid)
  local entry, implicit = short_entry(jid)
  if entry == nil and implicit ~= nil and redis.call('exists', Keys.history(jid)) == 0 then
    entry = implicit
  end
  if entry ~= nil then
    redis.call('lpush', Keys.history(jid), entry)
    redis.call('hset', Keys.job(jid), 'history', '')
  end
end

function Job.entry(now, what, extra)
  local entry = extra or {}
  entry.what = what
  entry.when = now
  return cjson.encode(entry)
end

-- A marker for an entry about to be removed (no entry is JSON like it).
local DROPPED = 'lanner:dropped'

-- `loaded`: the job as loaded in this call with its `history`, `jid`, `time`
-- and `queue` fields (as pop and complete load it), which spares looking
-- for a put entry; with `history_marked` set when the caller stores the
-- mark ('') in the field itself (pop's lock).
-- `line`: the entry as Job.entry(now, what, extra) encodes it, when the caller
-- has it (a batch's jobs get the same entry: it is encoded once per call).
function Job.record(now, jid, what, extra, loaded, line)
  local key = Keys.history(jid)
  line = line or Job.entry(now, what, extra)
  local short, implicit
  if loaded ~= nil and loaded.history_loaded then
    short, implicit = put_entries(loaded.history, loaded.jid_stored, loaded.time, loaded.queue)
  else
    short, implicit = short_entry(jid)
  end
  local marked = loaded ~= nil and loaded.history_marked
  local length
  local known = written_history and written_history[jid]
  Job.forget_history(jid)
  local first = short or (marked and implicit)
  if first then
    -- Mostly the list is empty: one RPUSH writes both entries in order.
    length = redis.call('rpush', key, first, line)
    if not marked then
      redis.call('hset', Keys.job(jid), 'history', '')
    end
    if length == 2 then
      written_history = written_history or {}
      written_history[jid] = { first, line }
    elseif short == nil then
      -- The list was there (no mark): the entry was not implied after all.
      redis.call('lset', key, -2, DROPPED)
      redis.call('lrem', key, -1, DROPPED)
      length = length - 1
    else
      -- An older process added entries: the put entry goes before them.
      local entries = redis.call('lrange', key, 0, -1)
      table.insert(entries, 1, table.remove(entries, length - 1))
      redis.call('del', key)
      call_spread('rpush', key, entries, 1000)
    end
  else
    length = redis.call('rpush', key, line)
    if length == 1 and implicit ~= nil then
      -- The list was new: the job's put entry was implied, and goes first.
      length = redis.call('lpush', key, implicit)
      redis.call('hset', Keys.job(jid), 'history', '')
      written_history = written_history or {}
      written_history[jid] = { implicit, line }
    elseif known ~= nil and length == #known + 1 then
      known[length] = line
      written_history[jid] = known
    end
  end
  history_limit = history_limit or math.max(1, Config.number('max-job-history', 100))
  local limit = history_limit
  if length > limit then
    Job.forget_history(jid)
    local first = redis.call('lindex', key, 0)
    redis.call('ltrim', key, length - limit + 1, -1)
    redis.call('lpush', key, first)
  end
end

-- The entries' texts, oldest first. A job with a list has its put entry
-- there (the short one is looked for only without: but for entries an older
-- process added, which show without the put entry until the next one written
-- here puts it first).
function Job.history_lines(jid)
  local known = written_history and written_history[jid]
  if known ~= nil then
    return known
  end
  local entries = redis.call('lrange', Keys.history(jid), 0, -1)
  if #entries == 0 then
    local entry, implicit = short_entry(jid)
    entries[1] = entry or implicit
  end
  return entries
end

function Job.history(jid)
  local entries = {}
  for index, line in ipairs(Job.history_lines(jid)) do
    entries[index] = cjson.decode(line)
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
      Limits.left(job.queue, Job.size(job))
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
  put_in_call[jid] = nil
  Job.forget_history(jid)
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
  Limits.left(job.queue, Job.size(job))
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
      local state, tags, queue, size, stored_jid = unpack(redis.call('hmget', key,
        'state', 'tags', 'queue', 'lanner_size', 'jid'))
      if state == 'depends' and string.find(tags or '', CASCADE_TAG_JSON, 1, true) then
        redis.call('zrem', Keys.queue(queue, 'depends'), dependent)
        Limits.left(queue, Job.counted(dependent, size, stored_jid))
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
-- (A job put earlier in this call is neither: its state is not read.) The
-- dependencies set of `jid` takes them all in one SADD per 1,000; each
-- dependency's dependents set takes `jid` in its own.
function Job.add_dependencies(jid, depends)
  local live = {}
  for _, dependency in ipairs(depends) do
    if dependency ~= jid then
      local known = put_in_call[dependency]
      if not known then
        local state = present(redis.call('hget', Keys.job(dependency), 'state'))
        known = state ~= nil and state ~= 'complete'
      end
      if known then
        live[#live + 1] = dependency
        redis.call('sadd', Keys.dependents(dependency), jid)
      end
    end
  end
  call_spread('sadd', Keys.dependencies(jid), live, 1000)
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
  if #dependents == 0 then
    -- Most jobs: the set does not exist, nothing to release or delete.
    return
  end
  local seq = {}
  for _, dependent in ipairs(dependents) do
    seq[dependent] = tonumber(redis.call('hget', Keys.job(dependent), 'lanner_seq')) or 0
  end
  table.sort(dependents, function(a, b) return seq[a] < seq[b] end)
  for _, dependent in ipairs(dependents) do
    redis.call('srem', Keys.dependencies(dependent), jid)
    Job.release_if_ready(now, dependent)
  end
  redis.call('del', Keys.dependents(jid))
end

-------------------------------------------------------------------------------
-- Completed jobs and retention
-------------------------------------------------------------------------------
-- At most this many expired jobs are deleted per completion, so one call stays
-- short even after jobs-history is lowered; the rest go on later completions.
local PRUNE_BATCH = 1000

-- Retention after `completions` jobs completed (1 unless Job.add_completed
-- prunes once for a batch: the same bound per completion, in one sweep).
local function prune_completed(now, completions)
  local most = PRUNE_BATCH * (completions or 1)
  local history = Config.number('jobs-history', 604800)
  local cutoff = Num.str(now - history)
  if completed.swept ~= cutoff then
    local expired = redis.call('zrangebyscore', Keys.completed, '-inf', cutoff,
      'LIMIT', 0, most)
    for _, jid in ipairs(expired) do
      Job.delete(jid)
      completed_removed(redis.call('zrem', Keys.completed, jid))
    end
    if #expired < most and now - history < now then
      completed.swept = cutoff
    end
  end

  local keep = Config.number('jobs-history-count', 50000)
  if completed.size == nil then
    completed.size = redis.call('zcard', Keys.completed)
  end
  local excess = completed.size - keep
  if excess > 0 then
    local oldest = redis.call('zrange', Keys.completed, 0, math.min(excess, most) - 1)
    for _, jid in ipairs(oldest) do
      Job.delete(jid)
      completed_removed(redis.call('zrem', Keys.completed, jid))
    end
  end
end

-- lanner.complete_many's jobs, completed at `now`, enter ql:completed in one
-- ZADD per 500, and retention runs once for them all. The same set as one
-- ZADD and one pruning per job: pruning by count always deletes the lowest
-- (score, jid) members, so the survivors are the same; the sweep by age has
-- one cutoff for the whole call.
function Job.add_completed(now, jids)
  if #jids == 0 then
    return
  end
  local at = Num.str(now)
  local members = {}
  for index, jid in ipairs(jids) do
    members[2 * index - 1], members[2 * index] = at, jid
  end
  for first = 1, #members, 1000 do
    local added = redis.call('zadd', Keys.completed,
      unpack(members, first, math.min(first + 999, #members)))
    if completed.size ~= nil then
      completed.size = completed.size + added
    end
  end
  prune_completed(now, #jids)
end
