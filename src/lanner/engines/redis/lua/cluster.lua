-------------------------------------------------------------------------------
-- cluster.lua: moving a job out of its partition (Redis Cluster only).
-------------------------------------------------------------------------------
-- On Redis Cluster each queue's keys live under its own hash tag (layout.lua,
-- CALLING CONVENTION), so a job that goes to a queue of another partition
-- cannot be moved in one call. It leaves in three steps, each one call, each
-- safe to repeat (lanner/engines/redis/cluster/transfer.py drives them):
--   1. here: lanner.move_out takes the job out of every set of its partition
--      (nobody pops, lists or counts it any more), sets its state to
--      `moving` with the put that recreates it (lanner_move, lanner_move_to:
--      the target partition), and lists it in ql:lanner:moving;
--   2. in the target partition: lanner.move_in, that put unless the job is
--      there already, with the job's history and tracking carried over;
--   3. here: lanner.move_done deletes what is left of it.
-- A process that dies between the steps leaves the jid in ql:lanner:moving,
-- where the next process to open the engine (or to look the job up) finds it
-- and does the steps that are left.
--
-- FLOW on a cluster: a concurrency key's slots and a rate bucket's starts live
-- in the partition of the queue whose pops count them (flow.lua, under the
-- partition's prefix), so one key is enforced over one partition's queues. The
-- partition that first names a key owns it: ql:{g}:lanner:flow:owners (HASH
-- 'c:<key>' or 'r:<bucket>' -> partition), claimed by lanner.flow_claim in
-- ql:{g} before the put; a put naming it from another partition is refused.
local Move = {}

-- The put of lanner.put_many that recreates the job, as it now is, in queue.
local function recreated(job, queue, delay)
  return cjson.encode({ {
    queue = queue, jid = job.jid, klass = job.klass, data = job.data, delay = delay,
    priority = tonumber(job.priority) or 0, tags = Json.decode(job.tags, {}),
    retries = tonumber(job.retries) or 5, if_exists = 'keep',
  } })
end

-- 'kept' (if_exists kept the job here), 'gone' (no such job), 'moving', or
-- 'was-moving' (a move of it had begun already: the caller finishes that one).
function Move.out(now, target, jid, if_exists, put)
  if Queue.kept_or_refused(jid, if_exists) then
    return 'kept'
  end
  local job = Job.load(jid)
  if job == nil then
    return 'gone'
  end
  if job.state == 'moving' then
    return 'was-moving'
  end
  if redis.call('scard', Keys.dependents(jid)) > 0
      or redis.call('scard', Keys.dependencies(jid)) > 0 then
    raise('Job %s has dependencies in its partition: it cannot move to another', jid)
  end
  -- As qless's put of an existing job: what the put leaves out, the job keeps.
  local spec = cjson.decode(put)
  local first = spec[1]
  if first.priority == nil then first.priority = tonumber(job.priority) or 0 end
  if first.retries == nil then first.retries = tonumber(job.retries) or 5 end
  if first.tags == nil then first.tags = Json.decode(job.tags, {}) end
  put = cjson.encode(spec)
  Job.unplace(now, job)
  if job.state == 'running' then
    Lanner.lock_released(job.queue)
    Events.lock_lost(jid, job.worker)
  end
  redis.call('hset', Keys.job(jid), 'state', 'moving', 'worker', '', 'expires', 0,
    'lanner_move_to', target, 'lanner_move', put)
  redis.call('sadd', Keys.moving, jid)
  return 'moving'
end

-- complete ... next <queue> for a queue of another partition: the job is
-- completed here, advanced, and moved out in the same call.
-- Its put into next_queue is the one lanner.move_in makes (the history entry is
-- taken back here), and announces none: the advance was.
function Move.complete_out(now, target, jid, worker, queue, data, next_queue, delay)
  local state = Job.complete(now, jid, worker, queue, data, { next = next_queue, delay = delay })
  Job.forget_history(jid)
  redis.call('rpop', Keys.history(jid))
  Move.out(now, target, jid, nil, recreated(Job.load(jid), next_queue, delay))
  redis.call('hset', Keys.job(jid), 'lanner_move_quiet', '1')
  return state
end

-- [target, put, history (JSON list), tracked (1/0), quiet (1: no put event)]
-- of a job moving out, or nil.
function Move.pending(jid)
  local found = redis.call('hmget', Keys.job(jid), 'state', 'lanner_move_to', 'lanner_move',
    'lanner_move_quiet')
  if found[1] ~= 'moving' then
    return nil
  end
  local history = Job.history_lines(jid)
  local tracked = redis.call('zscore', Keys.tracked, jid) and 1 or 0
  return { found[2], found[3], cjson.encode(history), tracked, found[4] and 1 or 0 }
end

-- Run put() without its put event (a job advanced into another partition).
function Move.quietly(put)
  local announce = Events.put
  Events.put = function() end
  local ok, problem = pcall(put)
  Events.put = announce
  if not ok then
    error(problem, 0)
  end
end

-- After the put of lanner.move_in: the history from before the move comes
-- first, and a tracked job stays tracked.
function Move.restore(now, jid, history, tracked)
  Job.unshorten_history(jid) -- the put's entry, into the list (and forgotten)
  local key = Keys.history(jid)
  local added = redis.call('lrange', key, 0, -1)
  redis.call('del', key)
  for _, entry in ipairs(history) do
    redis.call('rpush', key, entry)
  end
  for _, entry in ipairs(added) do
    redis.call('rpush', key, entry)
  end
  if tracked then
    redis.call('zadd', Keys.tracked, now, jid)
  end
end

function Move.done(jid)
  if present(redis.call('hget', Keys.job(jid), 'state')) == 'moving' then
    redis.call('zrem', Keys.tracked, jid)
    Job.delete(jid)
  end
  redis.call('srem', Keys.moving, jid)
end

-- The commands (arguments after <now>; the header lists them with api.lua's).
Move.api = {}

-- lanner.move_out target jid if_exists put
Move.api['lanner.move_out'] = function(now, args)
  return Move.out(now, Args.string(args[1], 'target'), Args.string(args[2], 'jid'),
    present(args[3]), Args.string(args[4], 'put'))
end

-- lanner.complete_out target jid worker queue data next delay (data '' = as it is)
Move.api['lanner.complete_out'] = function(now, args)
  local data = args[5] ~= '' and args[5] or nil
  return Move.complete_out(now, Args.string(args[1], 'target'), Args.string(args[2], 'jid'),
    Args.string(args[3], 'worker'), Args.string(args[4], 'queue'), data,
    Args.string(args[6], 'next'), Args.number(args[7], 'delay'))
end

-- lanner.move_pending jid
Move.api['lanner.move_pending'] = function(_, args)
  return Move.pending(Args.string(args[1], 'jid'))
end

-- lanner.move_in jid put history tracked quiet: the put (lanner.put_many's
-- jobs argument) unless the job is here already, then its history and tracking.
Move.api['lanner.move_in'] = function(now, args)
  local jid = Args.string(args[1], 'jid')
  if redis.call('exists', Keys.job(jid)) == 1 then
    return 0
  end
  local put = function() Move.put_many(now, { '', args[2] }) end
  if args[5] == '1' then
    Move.quietly(put)
  else
    put()
  end
  Move.restore(now, jid, Args.json(args[3], 'history'), args[4] == '1')
  return 1
end

-- lanner.flow_claim partition name...: in ql:{g}, each name ('c:<key>',
-- 'r:<bucket>') claimed for partition, all or none: {name, owner, ...} of the
-- names another partition owns (then nothing is claimed), else {}.
Move.api['lanner.flow_claim'] = function(_, args)
  local partition = Args.string(args[1], 'partition')
  local names = Args.rest(args, 2, 'name')
  if #names == 0 then
    return {}
  end
  local owners_key = Keys.prefix .. 'lanner:flow:owners'
  local owners = redis.call('hmget', owners_key, unpack(names))
  local taken = {}
  for index, name in ipairs(names) do
    local owner = owners[index]
    if owner and owner ~= partition then
      taken[#taken + 1] = name
      taken[#taken + 1] = owner
    end
  end
  if #taken == 0 then
    for index, name in ipairs(names) do
      if not owners[index] then
        redis.call('hset', owners_key, name, partition)
      end
    end
  end
  return taken
end

-- lanner.move_done jid
Move.api['lanner.move_done'] = function(_, args)
  Move.done(Args.string(args[1], 'jid'))
  return 1
end
