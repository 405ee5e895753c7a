-------------------------------------------------------------------------------
-- flow.lua: FLOW, rate limits and concurrency keys, checked by pop.
-------------------------------------------------------------------------------
-- A job put with a flow keeps it in its hash (lanner_flow: JSON {c = key,
-- m = cap, r = {{bucket, limit, period}, ...}}) and marks its queue
-- (ql:q:<queue>-flow). Only a pop of a marked queue reads lanner_flow; other
-- queues pay one EXISTS per pop and per lock released.
--
-- Concurrency: ql:lanner:flow:slots:<key> (ZSET jid -> when popped) holds
-- the jobs of the key popped since; those no longer running or stalled are
-- pruned when the key is counted, so a slot is the job's, not a worker's: it
-- follows the job through a dead worker's lock running out to its next
-- worker, and is free once the job is anything else, whatever command made it
-- so. A job whose key is full is parked: out of -work, into
-- ql:q:<queue>-parked:<key> (ZSET, its -work score), still `waiting`; the
-- queue's ql:q:<queue>-parked (HASH key -> cap) lists the keys parked. Each
-- pop of the queue first puts back as many parked jobs as their keys have
-- free slots, and a lock released in a queue with parked jobs wakes a worker.
--
-- Rates: ql:lanner:flow:starts:<bucket> (ZSET) holds the starts of the last
-- period (member <jid>:<now>, score: when), ql:lanner:flow:holds:<bucket>
-- (ZSET) the jobs held for it (member jid, score: when it may start). A job
-- finds room when fewer than `limit` starts fall in the last period; else it
-- is scheduled for when the limit-th latest of the starts and holds is a
-- period old, and held there, so that the jobs held come back `limit` at a
-- time, in order. Each key expires a period after its latest entry. A
-- rate-limited job is popped alone; its start is counted a slack ahead, a
-- held one comes back a lead early, and one released unstarted frees its
-- start (Flow.unstarted); periods are counted with the slack (window).

-- At most this many jobs a pop holds back (then a token is left for more).
Flow.HELD_CAP = 1000

-- Jobs fairness sent into -work, ever: a pop that sees it grow reads -work again.
Flow.placed = 0

-- The start window of the rate-limited job Flow.admit let run last, for its
-- popped history entry (`start`, `by`: lanner.worker.rates).
Flow.start = nil

-- Keys whose slots this call has pruned (a key is pruned once per call), and
-- queues known to have parked jobs or not (a complete_many asks once).
local pruned, has_parked
per_call(function()
  pruned, has_parked = nil, nil
end)

-- How many jobs hold a slot of `key`.
local function slots_used(key)
  local slots = Keys.flow_slots(key)
  if pruned == nil then
    pruned = {}
  end
  if not pruned[key] then
    pruned[key] = true
    local stale = {}
    for _, jid in ipairs(redis.call('zrange', slots, 0, -1)) do
      local state = redis.call('hget', Keys.job(jid), 'state')
      if state ~= 'running' and state ~= 'stalled' then
        stale[#stale + 1] = jid
      end
    end
    if #stale > 0 then
      redis.call('zrem', slots, unpack(stale))
    end
  end
  return redis.call('zcard', slots)
end

-- lanner.records's numbers: how late after its start time a run may start
-- (slack: 2 % of the period, at most 20 ms; its worker checks against 50 % of
-- it), and how early before it a job may be handed out (lead: 10 %, at most
-- 100 ms; its worker holds it until then). A start counts in its bucket for
-- the period and the slack (its window).
local function slack(period)
  return math.min(0.02, period * 0.02)
end

local function window(period)
  return period + slack(period)
end

local function lead(period)
  return math.min(0.1, period * 0.1)
end

-- When `bucket` has room for `jid` (now if it has): fewer than `limit` starts
-- in the last period (`period`: its window). Else the time at which the jobs held before it will have
-- had their turns: the (limit)-th latest of the starts and the holds, a
-- period on. Its own hold, if any, is given up first.
local function room_at(now, jid, bucket, limit, period)
  local starts, holds = Keys.flow_starts(bucket), Keys.flow_holds(bucket)
  local since = now - period
  redis.call('zremrangebyscore', starts, '-inf', since)
  redis.call('zremrangebyscore', holds, '-inf', since)
  local had_turn = redis.call('zrem', holds, jid) == 1
  local recent = redis.call('zcard', starts)
  if recent < limit then
    return now
  end
  -- A job back at its turn that still finds no room (the starts before it were
  -- late) keeps its place: it waits for the starts alone, not behind the holds.
  local index = recent - limit
  if not had_turn then
    index = index + redis.call('zcard', holds)
  end
  local nth
  if index < recent then
    nth = redis.call('zrange', starts, index, index, 'WITHSCORES')
  else
    nth = redis.call('zrange', holds, index - recent, index - recent, 'WITHSCORES')
  end
  return math.max(now, tonumber(nth[2]) + period)
end

local function add_entry(now, key, member, at, period)
  redis.call('zadd', key, at, member)
  redis.call('pexpire', key, math.ceil((at - now + period) * 1000) + 1000)
end

-- Fairness: a key's jobs take turns with other keys' in their queue. Only one
-- waiting job of a key is in -work at a time: ql:q:<queue>-fair (HASH key ->
-- that jid); the key's others wait aside in ql:q:<queue>-parked:f:<key>
-- (LIST, in put order). When the key's job in -work is popped (or has left
-- -work otherwise: a pop looks), its next job enters -work at the back, as if
-- it became ready then: a burst of one key goes one job per turn.
function Flow.entered(now, queue, jid, key)
  local fair = Keys.queue(queue, 'fair')
  local head = redis.call('hget', fair, key)
  if head and head ~= jid and redis.call('zscore', Keys.queue(queue, 'work'), head) then
    redis.call('zrem', Keys.queue(queue, 'work'), jid)
    redis.call('rpush', Keys.parked(queue, 'f:' .. key), jid)
  else
    redis.call('hset', fair, key, jid)
  end
end

local function next_turn(now, queue, key)
  local fair = Keys.queue(queue, 'fair')
  local parked = Keys.parked(queue, 'f:' .. key)
  while true do
    local jid = redis.call('lpop', parked)
    if not jid then
      redis.call('hdel', fair, key)
      return
    end
    local found = redis.call('hmget', Keys.job(jid), 'state', 'queue')
    if found[1] == 'waiting' and found[2] == queue then
      redis.call('hset', Keys.job(jid), 'time', now)
      Queue.take_seq(queue, jid)
      Queue.place(queue, jid)
      redis.call('hset', fair, key, jid)
      Flow.placed = Flow.placed + 1
      return
    end
  end
end

-- Each key whose job left -work (popped, held, cancelled, expired) sends in
-- its next one.
local function take_turns(now, queue)
  local heads = redis.call('hgetall', Keys.queue(queue, 'fair'))
  local work = Keys.queue(queue, 'work')
  for index = 1, #heads, 2 do
    if not redis.call('zscore', work, heads[index + 1]) then
      next_turn(now, queue, heads[index])
    end
  end
end

-- Whether a queue has flow jobs (its pops then call Flow.admit).
function Flow.active(queue)
  return redis.call('exists', Keys.queue(queue, 'flow')) == 1
end

-- Put marks the queue of a job given a flow, and lists its key and buckets
-- (ql:lanner:flow:keys: key -> cap; ql:lanner:flow:buckets: bucket -> JSON
-- [limit, period]) for Flow.state.
function Flow.mark(queue, text)
  redis.call('set', Keys.queue(queue, 'flow'), '1')
  local spec = cjson.decode(text)
  if spec.c ~= nil then
    redis.call('hset', Keys.flow_keys, spec.c, spec.m)
  end
  for _, rate in ipairs(spec.r or {}) do
    redis.call('hset', Keys.flow_buckets, rate[1], cjson.encode({ rate[2], rate[3] }))
  end
end

-- lanner.flow_state: each key listed (running, cap, jobs parked for it in
-- any queue) and bucket (starts in the last period, reservations ahead, when
-- it has room). A key or bucket with nothing to show leaves the list.
function Flow.state(now)
  local queues = {}
  for _, queue in ipairs(redis.call('zrange', Keys.queues, 0, -1)) do
    if Flow.active(queue) then
      queues[#queues + 1] = queue
    end
  end
  local keys = {}
  local listed = redis.call('hgetall', Keys.flow_keys)
  for index = 1, #listed, 2 do
    local key, cap = listed[index], tonumber(listed[index + 1])
    local running, held = slots_used(key), 0
    for _, queue in ipairs(queues) do
      held = held + redis.call('zcard', Keys.parked(queue, key))
    end
    if running == 0 and held == 0 then
      redis.call('hdel', Keys.flow_keys, key)
    else
      keys[#keys + 1] = { key, running, cap, held }
    end
  end
  local buckets = {}
  listed = redis.call('hgetall', Keys.flow_buckets)
  for index = 1, #listed, 2 do
    local bucket, rate = listed[index], cjson.decode(listed[index + 1])
    local limit, period = rate[1], rate[2]
    local key = Keys.flow_starts(bucket)
    local since = '(' .. Num.str(now - window(period))
    local recent = redis.call('zcount', key, since, '+inf') -- with starts counted ahead
    local held = redis.call('zcount', Keys.flow_holds(bucket), '(' .. Num.str(now), '+inf')
    local next_at = now
    if recent >= limit then
      local nth = redis.call('zrangebyscore', key, since, '+inf', 'WITHSCORES', 'LIMIT',
        recent - limit, 1)
      next_at = tonumber(nth[2]) + window(period)
    end
    if recent == 0 and held == 0 then
      redis.call('hdel', Keys.flow_buckets, bucket)
    else
      buckets[#buckets + 1] = { bucket, limit, period, recent, held, next_at }
    end
  end
  table.sort(keys, function(a, b) return a[1] < b[1] end)
  table.sort(buckets, function(a, b) return a[1] < b[1] end)
  return { keys = keys, buckets = buckets }
end

-- Back to -work: as many parked jobs of each key as it has free slots, and
-- the next job of each fair key whose job left -work.
function Flow.unpark(now, queue)
  take_turns(now, queue)
  local keys = redis.call('hgetall', Keys.queue(queue, 'parked'))
  for index = 1, #keys, 2 do
    local key, cap = keys[index], tonumber(keys[index + 1])
    local free = cap - slots_used(key)
    local parked = Keys.parked(queue, key)
    while free > 0 do
      local back = redis.call('zpopmax', parked, free)
      if #back == 0 then
        break
      end
      for at = 1, #back, 2 do
        -- A parked job moved or cancelled since is not brought back.
        local jid = back[at]
        if redis.call('hget', Keys.job(jid), 'state') == 'waiting'
            and redis.call('hget', Keys.job(jid), 'queue') == queue then
          Queue.place(queue, jid)
          free = free - 1
        end
      end
    end
    if redis.call('exists', parked) == 0 then
      redis.call('hdel', Keys.queue(queue, 'parked'), key)
    end
  end
end

-- Whether the flow of `jid`, read from -work by a pop, lets it run now: 'yes',
-- or 'rated' if a rate counted its start (its slot and starts are taken); if
-- not, it is parked or scheduled (out of -work either way) and 'held'
-- returned. A rate-limited job is popped alone (`first`: nothing is taken yet),
-- so that it starts as soon as it is handed out, behind no job of its batch:
-- else 'later', and it stays where it is for the next pop.
function Flow.admit(now, queue, jid, first)
  local text = redis.call('hget', Keys.job(jid), 'lanner_flow')
  if not text then
    return 'yes'
  end
  local spec = cjson.decode(text)
  local rates = spec.r or {}
  if #rates > 0 and not first then
    return 'later'
  end
  local key = spec.c
  if key ~= nil and redis.call('zscore', Keys.flow_slots(key), jid) == false
      and slots_used(key) >= spec.m then
    local work = Keys.queue(queue, 'work')
    local score = redis.call('zscore', work, jid)
    redis.call('zrem', work, jid)
    redis.call('zadd', Keys.parked(queue, key), score, jid)
    redis.call('hset', Keys.queue(queue, 'parked'), key, spec.m)
    return 'held'
  end
  local due, early, late = now, math.huge, math.huge
  for _, rate in ipairs(rates) do
    due = math.max(due, room_at(now, jid, rate[1], rate[2], window(rate[3])))
    early, late = math.min(early, lead(rate[3])), math.min(late, slack(rate[3]))
  end
  if due > now + early then
    -- Held until a lead before its turn, to be handed out by its start time.
    for _, rate in ipairs(rates) do
      add_entry(now, Keys.flow_holds(rate[1]), jid, due, window(rate[3]))
    end
    redis.call('zrem', Keys.queue(queue, 'work'), jid)
    redis.call('hmset', Keys.job(jid), 'state', 'scheduled', 'time', due - early)
    redis.call('zadd', Keys.queue(queue, 'scheduled'), due - early, jid)
    return 'held'
  end
  local start = math.max(due, now + late)
  for _, rate in ipairs(rates) do
    add_entry(now, Keys.flow_starts(rate[1]), jid .. ':' .. Num.str(start), start,
      window(rate[3]))
  end
  if #rates > 0 then
    Flow.start = { start = start, by = start + late * 0.5 }
  end
  if key ~= nil then
    redis.call('zadd', Keys.flow_slots(key), now, jid)
  end
  if spec.f ~= nil and redis.call('hget', Keys.queue(queue, 'fair'), spec.f) == jid then
    next_turn(now, queue, spec.f)
  end
  if #rates > 0 then
    return 'rated'
  end
  return 'yes'
end

-- A rate-limited job given back before its run started (lanner.release
-- without spend): the start its pop counted (its popped entry's `start`,
-- which JSON keeps to 14 digits, hence the millisecond around it) leaves its
-- buckets, for another run to take.
function Flow.unstarted(jid)
  local text = redis.call('hget', Keys.job(jid), 'lanner_flow')
  if not text then
    return
  end
  local rates = cjson.decode(text).r or {}
  if #rates == 0 then
    return
  end
  local start
  local recent = redis.call('lrange', Keys.history(jid), -10, -1)
  for index = #recent, 1, -1 do
    local entry = cjson.decode(recent[index])
    if entry.what == 'popped' then
      start = entry.start
      break
    end
  end
  if type(start) ~= 'number' then
    return
  end
  local prefix = jid .. ':'
  for _, rate in ipairs(rates) do
    local starts = Keys.flow_starts(rate[1])
    for _, member in ipairs(redis.call('zrangebyscore', starts, start - 0.001, start + 0.001)) do
      if string.sub(member, 1, #prefix) == prefix then
        redis.call('zrem', starts, member)
        break
      end
    end
  end
end

-- A lock was given up in `queue`: a parked job may run now.
function Flow.lock_released(queue)
  if has_parked == nil then
    has_parked = {}
  end
  local parked = has_parked[queue]
  if parked == nil then
    parked = redis.call('exists', Keys.queue(queue, 'parked')) == 1
    has_parked[queue] = parked
  end
  if parked then
    Lanner.notify(queue, 1)
  end
end
