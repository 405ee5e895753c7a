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
-- here. (The histogram shares its hash with the timings, so histogram-history
-- is not enforced separately.)

-- Seconds the stats of `day` are still kept at time `now` (<= 0: not kept).
local function keep_for(day, now)
  return math.floor(day + (Config.number('stats-history', 30) + 1) * DAY - now)
end

-- The histogram bucket (a hash field) for a duration in seconds.
local function bucket(seconds)
  if seconds < 60 then
    return 's' .. math.floor(seconds)
  elseif seconds < 3600 then
    return 'm' .. math.floor(seconds / 60)
  elseif seconds < DAY then
    return 'h' .. math.floor(seconds / 3600)
  end
  return 'd' .. math.floor(seconds / DAY)
end

-- Add one duration to the wait or run timings of `queue` for the day of `now`.
function Stats.record(kind, queue, now, seconds)
  if seconds < 0 then
    -- Clients' clocks can disagree a little; a negative time is noise.
    seconds = 0
  end
  local day = day_of(now)
  local ttl = keep_for(day, now)
  if ttl <= 0 then
    return
  end
  local key = Keys.stats(kind, day, queue)
  local current = redis.call('hmget', key, 'total', 'mean', 'vk')
  local total = (tonumber(current[1]) or 0) + 1
  local mean = tonumber(current[2]) or 0
  local vk = tonumber(current[3]) or 0
  local delta = seconds - mean
  mean = mean + delta / total
  vk = vk + delta * (seconds - mean)
  redis.call('hmset', key, 'total', total, 'mean', mean, 'vk', vk)
  redis.call('hincrby', key, bucket(seconds), 1)
  redis.call('expire', key, ttl)
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
