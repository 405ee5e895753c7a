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

-- The stored settings (key -> value), read whole at the first Config.get of a
-- call: a command mostly needs several, and one HGETALL of a small hash costs
-- less than a few HGETs. A setting only changes through config.set /
-- config.unset, which update this copy too.
local stored
-- Config.heartbeat's, Config.max_concurrency's and Config.limits' results
-- in this call, by queue.
local heartbeats, concurrency, limits
per_call(function()
  stored, heartbeats, concurrency, limits = nil, {}, {}, nil
end)

local function read_stored()
  stored = {}
  local flat = redis.call('hgetall', Keys.config)
  for index = 1, #flat, 2 do
    stored[flat[index]] = flat[index + 1]
  end
end

-- The stored value (a string), else the default, else nil.
function Config.get(key)
  if stored == nil then
    read_stored()
  end
  local value = stored[key]
  if value == nil then
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
  read_stored()
  for key, value in pairs(stored) do
    merged[key] = value
  end
  return merged
end

function Config.set(key, value)
  redis.call('hset', Keys.config, key, value)
  stored = nil
  heartbeats, concurrency, limits = {}, {}, nil
  Events.log({ 'option', key, 'event', 'config_set', 'value', value })
end

function Config.unset(key)
  redis.call('hdel', Keys.config, key)
  stored = nil
  heartbeats, concurrency, limits = {}, {}, nil
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

-- <queue>-max-concurrency (0: no limit), remembered per queue for the call
-- (a batch's completions ask once per job).
function Config.max_concurrency(queue)
  local limit = concurrency[queue]
  if limit == nil then
    limit = Config.number(queue .. '-max-concurrency', 0)
    concurrency[queue] = limit
  end
  return limit
end

-- LIMITS: a queue's bounds, from <queue>-max-items, -max-size (bytes of
-- data), -max-item-size, -max-age (seconds) and -discard-old-when-full, as
-- { items, size, item_size, age, discard }, each nil when unset or 0; false
-- when the queue has none. Every put asks, so the bounds of all queues are
-- found in one pass over the stored settings, the first time a call asks
-- (config.set and config.unset start it again): most stores set none, and
-- then no key is built and looked up per queue.
local LIMIT_SETTINGS = {
  { 'items', '-max-items' },
  { 'size', '-max-size' },
  { 'item_size', '-max-item-size' },
  { 'age', '-max-age' },
  { 'discard', '-discard-old-when-full' },
}

-- (Shared, never written: a call makes no table where no queue has bounds.)
local NO_LIMITS = {}

local function index_limits()
  if stored == nil then
    read_stored()
  end
  limits = NO_LIMITS
  for key, value in pairs(stored) do
    if string.find(key, '-max-', 1, true) or string.find(key, '-discard-', 1, true) then
      for _, setting in ipairs(LIMIT_SETTINGS) do
        local suffix = setting[2]
        if #key > #suffix and string.sub(key, -#suffix) == suffix then
          local number = Num.finite(value)
          if number ~= nil and number > 0 then
            local queue = string.sub(key, 1, #key - #suffix)
            if limits == NO_LIMITS then
              limits = {}
            end
            limits[queue] = limits[queue] or {}
            limits[queue][setting[1]] = number
          end
          break
        end
      end
    end
  end
end

function Config.limits(queue)
  if limits == nil then
    index_limits()
  end
  return limits[queue] or false
end
