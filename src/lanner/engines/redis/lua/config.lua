-------------------------------------------------------------------------------
-- config.lua: settings in the hash ql:config, over built-in defaults.
-------------------------------------------------------------------------------
-- Only these defaults are listed by `config.get` with no key. Other settings
-- read by the engine (max-job-history, max-worker-age, <queue>-heartbeat,
-- <queue>-max-concurrency) have their fallback where they are read.
Config.defaults = {
  ['application'] = 'qless',
  ['heartbeat'] = 60,
  ['grace-period'] = 10,
  ['stats-history'] = 30,
  ['histogram-history'] = 7,
  ['jobs-history'] = 604800,
  ['jobs-history-count'] = 50000,
}

-- Settings read so far in this call (key -> stored value, or false when
-- unset). A setting only changes through config.set / config.unset, which
-- update the cache too, so one call reads each setting at most once however
-- many jobs it handles.
local config_cache
-- Config.heartbeat's results in this call, by queue.
local heartbeats
per_call(function()
  config_cache, heartbeats = {}, {}
end)

-- The stored value (a string), else the default, else nil.
function Config.get(key)
  local value = config_cache[key]
  if value == nil then
    value = redis.call('hget', Keys.config, key)
    config_cache[key] = value
  end
  if value == false then
    return Config.defaults[key]
  end
  return value
end

-- A setting read as a number; `fallback` when unset or not numeric.
function Config.number(key, fallback)
  local value = Num.finite(Config.get(key))
  if value == nil then
    return fallback
  end
  return value
end

-- Defaults merged with every stored setting.
function Config.all()
  local merged = {}
  for key, value in pairs(Config.defaults) do
    merged[key] = value
  end
  local stored = redis.call('hgetall', Keys.config)
  for index = 1, #stored, 2 do
    merged[stored[index]] = stored[index + 1]
  end
  return merged
end

function Config.set(key, value)
  redis.call('hset', Keys.config, key, value)
  config_cache[key] = nil
  heartbeats = {}
  Events.log({ 'option', key, 'event', 'config_set', 'value', value })
end

function Config.unset(key)
  redis.call('hdel', Keys.config, key)
  config_cache[key] = nil
  heartbeats = {}
  Events.log({ 'event', 'config_unset', 'option', key })
end

-- Lock duration for a queue: <queue>-heartbeat, else heartbeat. Remembered
-- per queue for the call (pop asks once per job); config.set and
-- config.unset forget it (see `heartbeats` above).
function Config.heartbeat(queue)
  local seconds = heartbeats[queue]
  if seconds == nil then
    seconds = Config.number(queue .. '-heartbeat', nil)
    if seconds == nil then
      seconds = Config.number('heartbeat', 60)
    end
    heartbeats[queue] = seconds
  end
  return seconds
end
