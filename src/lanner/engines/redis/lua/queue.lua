-------------------------------------------------------------------------------
-- queue.lua: a queue's sets, and the order of its waiting jobs (placement in -work).
-- Putting jobs in is put.lua's, handing them out pop.lua's, looking at queues
-- queues.lua's.
-------------------------------------------------------------------------------
-- A queue is five zsets (see the header): -work (ready jobs, by score),
-- -scheduled (by due time), -locks (running jobs, by lock expiry), -depends
-- (by put time) and -recur (templates, by next run). Nothing moves on its own:
-- due scheduled jobs, due recurring runs and expired locks are dealt with by
-- the commands that look at the queue (pop, peek, queues, jobs).

-- qless's score for a waiting job (see SCORE_TIME_SCALE).
function Queue.score(priority, ready_at)
  return priority - ready_at / SCORE_TIME_SCALE
end

-- ql:queues lists every queue ever used, scored by when it was first seen.
-- Queues already known in this call are not looked up again (queue.forget
-- drops them from this memo), nor are those whose usage hash, read by a put
-- in this call anyway, says they are listed (Limits.listed).
local remembered
per_call(function()
  remembered = {}
end)

function Queue.remember(now, queue)
  if remembered[queue] then
    return
  end
  if not Limits.listed(queue) then
    if not redis.call('zscore', Keys.queues, queue) then
      redis.call('zadd', Keys.queues, now, queue)
    end
    Limits.mark_listed(queue)
  end
  remembered[queue] = true
end

-------------------------------------------------------------------------------
-- The order of waiting jobs
-------------------------------------------------------------------------------
-- Waiting jobs pop by priority (higher first), then by the time they became
-- ready, then in insertion order: a sequence number (hash field lanner_seq,
-- from the queue's counter: Queue.next_seq) that put, retry, advance, unfail
-- and recurring spawns give. A dependency release, a promotion, a release and a
-- priority change keep it. Jobs stored without one (by an older script) count
-- as 0. This is the SQLite engine's order, for every caller of the script.
--
-- qless's score alone ties jobs ready at the same time (a sorted set then
-- orders them by jid), and no fixed formula of (priority, ready, seq) fits in
-- one double: at priority 7 and today's Unix times a double has about 112
-- steps per millisecond of ready time, while the sequence number grows without
-- bound. So -work holds the order by placement: a job goes in at its rank,
-- found by binary search over -work comparing (priority, ready, seq) read from
-- the job hashes, with a score strictly between the scores of its neighbours:
-- qless's score when that fits (the usual case), else the next double below
-- the job ahead. Jobs that tie on qless's score thus sit on adjacent doubles
-- just below it; when a job must go between two adjacent doubles, the jobs
-- behind it move down one double each, up to the first gap. The order is
-- exact at any precision; a score may sit below qless's score by as many
-- doubles as jobs share (or crowd) that time, which no reader sees: every
-- reader (pop, peek, jobs) takes -work highest score first, as qless does.

-- A job's place in the order: { priority, ready time, sequence number }.
function Queue.order(jid)
  local values = redis.call('hmget', Keys.job(jid), 'priority', 'time', 'lanner_seq')
  return { tonumber(values[1]) or 0, tonumber(values[2]) or 0, tonumber(values[3]) or 0 }
end

-- Whether order `a` pops before order `b`.
function Queue.ahead(a, b)
  if a[1] ~= b[1] then
    return a[1] > b[1]
  elseif a[2] ~= b[2] then
    return a[2] < b[2]
  end
  return a[3] < b[3]
end

-- Orders known without reading the job hash, or nil. Only lanner.put_many
-- sets it (see Queue.put_many): there each job placed in -work is remembered
-- here, so the next job, which mostly goes right behind it, does not read it
-- back. Within put_many nothing else changes a job's priority, ready time or
-- sequence number, and Queue.put forgets the job it moves.
local known_orders

-- Also within put_many: queue -> { jid, score } of the last job in -work, when
-- put_many placed it there (nothing else in put_many adds to -work, and
-- Job.unplace forgets the queue's entry when it takes a job out).
local known_tails

-- Also within put_many: jids known to have no job yet (one EXISTS over the
-- batch said so), whose put need not look first.
local fresh_jids

-- ZADDs to -work of jobs placed behind the last one, deferred to one ZADD per
-- queue (queue -> {score, jid, ...}). They are made before anything reads
-- or changes that -work (Queue.place, Job.unplace) and when the command ends
-- (Queue.flush), and ZADD takes pairs in order: the set ends up as with one
-- ZADD per job.
local deferred_work
per_call(function()
  known_orders, known_tails, fresh_jids, deferred_work = nil, nil, nil, {}
end)

local function flush_work(queue)
  local deferred = deferred_work[queue]
  if deferred ~= nil then
    deferred_work[queue] = nil
    call_spread('zadd', Keys.queue(queue, 'work'), deferred, 1000)
  end
end

function Queue.flush()
  for queue in pairs(deferred_work) do
    flush_work(queue)
  end
end

-- A job is about to leave the queue's -work.
function Queue.forget_tail(queue)
  flush_work(queue)
  if known_tails then
    known_tails[queue] = nil
  end
end

local function order_of(jid)
  local order = known_orders and known_orders[jid]
  if order ~= nil then
    return order
  end
  return Queue.order(jid)
end

-- A new sequence number in `queue`: the job goes to the back of the line of
-- jobs ready there at the same time. Sequence numbers are only compared
-- between jobs of one queue (a job that changes queues takes a new one), so
-- each queue counts its own, in its usage hash, which a put reads and writes
-- anyway (Limits.next_seq): no command of its own.
function Queue.next_seq(queue)
  return Limits.next_seq(queue)
end

function Queue.take_seq(queue, jid)
  redis.call('hset', Keys.job(jid), 'lanner_seq', Queue.next_seq(queue))
end

local TINY = 2 ^ -1074

-- The largest double below x (x finite).
local function below(x)
  if x == 0 then
    return -TINY
  end
  local mantissa, exponent = math.frexp(x)
  local step = 2 ^ (exponent - 53)
  if mantissa == 0.5 then
    -- x is a power of two: the doubles just below it are twice as dense.
    step = step / 2
  end
  return x - math.max(step, TINY)
end

-- Move the jobs from `rank` on that score `score` or more down, each to the
-- double below the one before it, until one is already lower. All are read
-- before any moves: a moved job may tie with the next one for a moment, and
-- a sorted set orders ties by jid, which would shuffle the ranks still to read.
local function make_room(work, rank, score)
  local moving, done = {}, false
  while not done do
    local behind = redis.call('zrevrange', work, rank, rank + 31, 'WITHSCORES')
    done = #behind < 64
    for index = 1, #behind, 2 do
      if tonumber(behind[index + 1]) < score then
        done = true
        break
      end
      score = below(score)
      moving[#moving + 1] = { behind[index], score }
    end
    rank = rank + 32
  end
  for _, job in ipairs(moving) do
    redis.call('zadd', work, job[2], job[1])
  end
end

-- Put a waiting job (hash up to date, not in -work) into the queue's -work at
-- its place in the order. Jobs stalled by `timeout` (score +inf) stay ahead.
-- `mine` is the job's order when the caller knows it (else it is read).
-- Add `jid` to -work at `score`; `at_back`: behind every job there.
local function put_at(queue, jid, mine, score, at_back)
  if known_orders == nil then
    redis.call('zadd', Keys.queue(queue, 'work'), score, jid)
    return
  end
  known_orders[jid] = mine
  -- A job placed behind all others is the new last job.
  if at_back then
    known_tails[queue] = { jid, score }
    local deferred = deferred_work[queue] or {}
    deferred[#deferred + 1], deferred[#deferred + 2] = score, jid
    deferred_work[queue] = deferred
  else
    known_tails[queue] = nil
    redis.call('zadd', Keys.queue(queue, 'work'), score, jid)
  end
end

-- The last job's order need not be read when its score alone says it goes
-- ahead: every job's score in -work is at most qless's score of its order
-- (or +inf), and with whole priorities a qless score above this job's means
-- a higher priority, or the same one and an earlier ready time (the time
-- term stays below 1, and rounding keeps the order of exact values). A queue
-- that ever had a job of a fractional priority placed is marked in its usage
-- hash (Limits.fractional): there the order is always read.
function Queue.place(queue, jid, mine)
  mine = mine or Queue.order(jid)
  local score = Queue.score(mine[1], mine[2])
  local whole = mine[1] % 1 == 0
  if not whole then
    Limits.mark_fractional(queue)
  end
  -- The last job first, as a new job mostly goes behind all others. (The last
  -- rank holds the lowest score, lowest jid among ties: what ZRANGE 0 0 gives.)
  local work = Keys.queue(queue, 'work')
  local last = known_tails and known_tails[queue]
  if last == nil then
    flush_work(queue)
    last = redis.call('zrange', work, 0, 0, 'WITHSCORES')
  end
  if #last == 0 then
    return put_at(queue, jid, mine, score, true)
  end
  local last_job, last_score = last[1], tonumber(last[2])
  if last_score == math.huge
      or (last_score > score and whole and not Limits.fractional(queue))
      or Queue.ahead(order_of(last_job), mine) then
    if last_score <= score then
      score = below(last_score)
    end
    return put_at(queue, jid, mine, score, true)
  end
  flush_work(queue)
  local members = {}
  local function member(rank)
    local known = members[rank]
    if known == nil then
      local found = redis.call('zrevrange', work, rank, rank, 'WITHSCORES')
      known = { found[1], tonumber(found[2]) }
      members[rank] = known
    end
    return known[1], known[2]
  end
  local function goes_ahead(rank)
    local other, other_score = member(rank)
    return other_score == math.huge or Queue.ahead(order_of(other), mine)
  end
  -- The first rank whose job does not go ahead of this one.
  local size = redis.call('zcard', work)
  members[size - 1] = { last_job, last_score }
  local low, high = 0, size
  while low < high do
    local middle = math.floor((low + high) / 2)
    if goes_ahead(middle) then
      low = middle + 1
    else
      high = middle
    end
  end
  if low > 0 then
    local _, ahead = member(low - 1)
    if ahead <= score then
      score = below(ahead)
    end
  end
  make_room(work, low, score)
  put_at(queue, jid, mine, score, false)
end
