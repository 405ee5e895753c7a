-------------------------------------------------------------------------------
-- stats.lua: per-queue, per-day timings and counters.
-------------------------------------------------------------------------------
-- Timings (wait: ready -> popped, run: popped -> completed) live in the hashes
-- ql:s:wait:<day>:<queue> and ql:s:run:<day>:<queue>:
--   total, mean, vk   count, running mean, and Welford's sum of squared
--                     deviations (variance = vk / (total - 1)), updated in one
--                     pass so no sample has to be kept;
--   s0..s59           one bucket per second below a minute,
--   m1..m59           one per minute below an hour,
--   h1..h23           one per hour below a day,
--   d1, d2, ...       one per day (only d1..d6 are reported).
-- Counters (failures, failed, retries) live in ql:s:stats:<day>:<queue>.
-- Every stats hash expires stats-history days after its day ends. The TTL is
-- computed from the caller's `now`, not Redis' clock, like every other time
-- here; a timing hash gets it once, when it is made. (The histogram shares its
-- hash with the timings, so histogram-history is not enforced separately.)

-- Seconds the stats of `day` are still kept at time `now` (<= 0: not kept).
local function keep_for(day, now)
  return math.floor(day + (Config.number('stats-history', 30) + 1) * DAY - now)
end

-- The field names s0..s59, made as first needed and kept (most durations a
-- drain records are under a minute: no new string per job).
local SECOND_BUCKETS = {}

-- The histogram bucket (a hash field) for a duration in seconds.
local function bucket(seconds)
  if seconds < 60 then
    local whole = math.floor(seconds)
    local field = SECOND_BUCKETS[whole]
    if field == nil then
      field = 's' .. whole
      SECOND_BUCKETS[whole] = field
    end
    return field
  elseif seconds < 3600 then
    return 'm' .. math.floor(seconds / 60)
  elseif seconds < DAY then
    return 'h' .. math.floor(seconds / 3600)
  end
  return 'd' .. math.floor(seconds / DAY)
end

-- Timings recorded in this call, written by Stats.flush when the command
-- ends (api_lanner.lua): a pop or complete_many of many jobs updates each hash once
-- instead of once per job. The Welford updates are the same, in the same
-- order, and a number stored in Redis reads back exactly, so the stored
-- result is what updating the hash per job would leave. Nothing reads these
-- hashes inside the commands that record timings.
local pending_timings, pending_order

-- The timing each kind ('wait', 'run') of each queue records into in this
-- call (kind -> queue -> timing), and the day and TTL of the call's `now`
-- (it is asked for once per job popped or completed: no key is built and no
-- setting read for each).
local timings_of, memo_now, memo_day, memo_ttl
per_call(function()
  pending_timings, pending_order = {}, {}
  timings_of, memo_now, memo_day, memo_ttl = nil, nil, nil, nil
end)

-- Add one duration to the wait or run timings of `queue` for the day of `now`.
function Stats.record(kind, queue, now, seconds)
  if seconds < 0 then
    -- Clients' clocks can disagree a little; a negative time is noise.
    seconds = 0
  end
  if memo_now ~= now then
    memo_now, memo_day = now, day_of(now)
    memo_ttl = keep_for(memo_day, now)
  end
  local day, ttl = memo_day, memo_ttl
  if ttl <= 0 then
    return
  end
  timings_of = timings_of or {}
  local of_kind = timings_of[kind]
  if of_kind == nil then
    of_kind = {}
    timings_of[kind] = of_kind
  end
  local timing = of_kind[queue]
  if timing == nil or timing.day ~= day then
    local key = Keys.stats(kind, day, queue)
    timing = pending_timings[key]
    if timing == nil then
      local current = redis.call('hmget', key, 'total', 'mean', 'vk')
      timing = {
        new = current[1] == false,
        total = tonumber(current[1]) or 0,
        mean = tonumber(current[2]) or 0,
        vk = tonumber(current[3]) or 0,
        buckets = {},
        bucket_order = {},
        day = day,
      }
      pending_timings[key] = timing
      pending_order[#pending_order + 1] = key
    end
    of_kind[queue] = timing
  end
  local total = timing.total + 1
  local mean = timing.mean
  local delta = seconds - mean
  mean = mean + delta / total
  timing.vk = timing.vk + delta * (seconds - mean)
  timing.total, timing.mean, timing.ttl = total, mean, ttl
  local field = bucket(seconds)
  if timing.buckets[field] == nil then
    timing.buckets[field] = 0
    timing.bucket_order[#timing.bucket_order + 1] = field
  end
  timing.buckets[field] = timing.buckets[field] + 1
end

-- Write the timings recorded in this call.
function Stats.flush()
  for _, key in ipairs(pending_order) do
    local timing = pending_timings[key]
    redis.call('hmset', key, 'total', timing.total, 'mean', timing.mean, 'vk', timing.vk)
    for _, field in ipairs(timing.bucket_order) do
      redis.call('hincrby', key, field, timing.buckets[field])
    end
    -- The expiry is a fixed moment for the day (keep_for: the day's start plus
    -- stats-history + 1 days), so it is set when the hash is made, not again at
    -- every pop and completion. (A stats-history changed during the day applies
    -- from the next day's hashes.)
    if timing.new then
      redis.call('expire', key, timing.ttl)
    end
  end
end

-- Add `by` to a daily counter (failures, failed, retries) of the day of `when`.
-- `failed` is decremented on the day the job failed, not the current day, so
-- each day's figure stays "how many of that day's failures are unresolved".
-- The current time `now` decides whether that day is still kept.
function Stats.count(queue, when, field, by, now)
  local day = day_of(when)
  local ttl = keep_for(day, now)
  if ttl <= 0 then
    return
  end
  local key = Keys.stats('stats', day, queue)
  redis.call('hincrby', key, field, by)
  redis.call('expire', key, ttl)
end

-- The reported histogram: 60 seconds, 59 minutes, 23 hours, 6 days.
local function histogram(fields)
  local counts = {}
  local function add(prefix, first, last)
    for index = first, last do
      counts[#counts + 1] = tonumber(fields[prefix .. index]) or 0
    end
  end
  add('s', 0, 59)
  add('m', 1, 59)
  add('h', 1, 23)
  add('d', 1, 6)
  return counts
end

local function timing(kind, day, queue)
  local flat = redis.call('hgetall', Keys.stats(kind, day, queue))
  local fields = {}
  for index = 1, #flat, 2 do
    fields[flat[index]] = flat[index + 1]
  end
  local count = tonumber(fields.total) or 0
  local std = 0
  if count > 1 then
    -- Sample standard deviation; rounding can leave vk a hair below zero.
    std = math.sqrt(math.max(0, (tonumber(fields.vk) or 0) / (count - 1)))
  end
  return {
    count = count,
    mean = tonumber(fields.mean) or 0,
    std = std,
    histogram = histogram(fields),
  }
end

function Stats.get(queue, date)
  local day = day_of(date)
  local counters = redis.call('hmget', Keys.stats('stats', day, queue),
    'failures', 'failed', 'retries')
  return {
    failures = tonumber(counters[1]) or 0,
    failed = tonumber(counters[2]) or 0,
    retries = tonumber(counters[3]) or 0,
    wait = timing('wait', day, queue),
    run = timing('run', day, queue),
  }
end
