-------------------------------------------------------------------------------
-- recurring.lua: templates that spawn a job every `interval` seconds.
-------------------------------------------------------------------------------
-- A template is the hash ql:r:<jid>; its next run is its score in
-- ql:q:<queue>-recur. Runs are spawned lazily, by whoever reads the queue
-- (pop, peek): each due run becomes an ordinary job <jid>-<n>, put at the
-- time the run was due, as if a clock had put it then.

-- Most runs spawned for one template in one call, so a template that has been
-- idle for a long time (or a tiny interval) cannot make one call huge.
local SPAWN_LIMIT = 1000

local TEMPLATE_FIELDS = {
  'klass', 'data', 'priority', 'tags', 'retries', 'interval', 'backlog', 'count', 'queue',
}

local function load(jid)
  local values = redis.call('hmget', Keys.recurring(jid), unpack(TEMPLATE_FIELDS))
  if not values[1] then
    return nil
  end
  local template = { jid = jid }
  for index, field in ipairs(TEMPLATE_FIELDS) do
    template[field] = present(values[index])
  end
  for _, field in ipairs({ 'priority', 'retries', 'interval', 'backlog', 'count' }) do
    template[field] = tonumber(template[field]) or 0
  end
  return template
end

local function require_template(jid)
  local template = load(jid)
  if template == nil then
    raise('Recurring job %s does not exist', jid)
  end
  return template
end

-- Create or replace a template. A replaced template keeps its spawn count (so
-- jids never repeat) and moves if the queue changed. options: priority, tags,
-- retries, backlog. Returns the jid.
function Recurring.recur(now, queue, jid, klass, data, interval, offset, options)
  local old = load(jid)
  if old ~= nil and old.queue ~= queue then
    redis.call('zrem', Keys.queue(old.queue, 'recur'), jid)
  end
  redis.call('hmset', Keys.recurring(jid),
    'jid', jid, 'klass', klass, 'data', data, 'queue', queue, 'state', 'recur',
    'type', 'interval', 'interval', interval,
    'priority', options.priority or 0,
    'tags', Json.array(options.tags or {}),
    'retries', options.retries or 0,
    'backlog', options.backlog or 0,
    'count', old and old.count or 0)
  redis.call('zadd', Keys.queue(queue, 'recur'), now + offset, jid)
  Queue.remember(now, queue)
  return jid
end

function Recurring.unrecur(jid)
  local queue = present(redis.call('hget', Keys.recurring(jid), 'queue'))
  if queue ~= nil then
    redis.call('zrem', Keys.queue(queue, 'recur'), jid)
  end
  redis.call('del', Keys.recurring(jid))
  return true
end

function Recurring.get(jid)
  local template = load(jid)
  if template == nil then
    return nil
  end
  return {
    jid = jid,
    klass = template.klass,
    state = 'recur',
    queue = template.queue,
    priority = template.priority,
    interval = template.interval,
    retries = template.retries,
    count = template.count,
    data = template.data,
    tags = Json.decode(template.tags, {}),
    backlog = template.backlog,
  }
end

-- changes: {field = value} for priority, interval, retries, data, klass,
-- queue, backlog, already checked. A new interval moves the next run by the
-- difference, as if the last run had been scheduled with the new interval.
function Recurring.update(now, jid, changes)
  local template = require_template(jid)
  local key = Keys.recurring(jid)
  local recur = Keys.queue(template.queue, 'recur')
  for field, value in pairs(changes) do
    if field == 'interval' then
      local next_run = tonumber(redis.call('zscore', recur, jid))
      if next_run ~= nil then
        redis.call('zadd', recur, next_run - template.interval + value, jid)
      end
    end
    if field ~= 'queue' then
      redis.call('hset', key, field, value)
    end
  end
  local queue = changes.queue
  if queue ~= nil and queue ~= template.queue then
    local next_run = redis.call('zscore', recur, jid) or now
    redis.call('zrem', recur, jid)
    redis.call('zadd', Keys.queue(queue, 'recur'), next_run, jid)
    redis.call('hset', key, 'queue', queue)
    Queue.remember(now, queue)
  end
  return true
end

-- Returns the template's tags after the change.
function Recurring.tag(jid, tags)
  local template = require_template(jid)
  local current = Json.decode(template.tags, {})
  local has = {}
  for _, tag in ipairs(current) do
    has[tag] = true
  end
  for _, tag in ipairs(tags) do
    if not has[tag] then
      has[tag] = true
      current[#current + 1] = tag
    end
  end
  redis.call('hset', Keys.recurring(jid), 'tags', Json.array(current))
  return current
end

function Recurring.untag(jid, tags)
  local template = require_template(jid)
  local dropping, kept = {}, {}
  for _, tag in ipairs(tags) do
    dropping[tag] = true
  end
  for _, tag in ipairs(Json.decode(template.tags, {})) do
    if not dropping[tag] then
      kept[#kept + 1] = tag
    end
  end
  redis.call('hset', Keys.recurring(jid), 'tags', Json.array(kept))
  return kept
end

-- The runs of one template due by `now`: the first run time and how many.
-- With backlog b > 0, only the latest b runs due strictly before now are
-- caught up (plus a run due exactly now); older missed runs are skipped.
local function due_runs(now, next_run, interval, backlog)
  local runs = math.floor((now - next_run) / interval) + 1
  if backlog > 0 then
    local overdue = runs
    if next_run + (runs - 1) * interval == now then
      overdue = runs - 1
    end
    if overdue > backlog then
      local skip = overdue - backlog
      next_run = next_run + skip * interval
      runs = runs - skip
    end
  end
  return next_run, math.min(runs, SPAWN_LIMIT)
end

-- Spawn every due run of the queue's templates.
function Recurring.spawn_due(now, queue)
  local recur = Keys.queue(queue, 'recur')
  local due = redis.call('zrangebyscore', recur, '-inf', now, 'WITHSCORES')
  for index = 1, #due, 2 do
    local jid = due[index]
    local template = load(jid)
    if template == nil or template.interval <= 0 then
      -- A dangling entry, or a template no run can be computed for.
      redis.call('zrem', recur, jid)
    else
      local run_at, runs = due_runs(now, tonumber(due[index + 1]), template.interval,
        template.backlog)
      local options = {
        priority = template.priority,
        retries = template.retries,
        tags = Json.decode(template.tags, {}),
      }
      local data = template.data or '{}'
      for _ = 1, runs do
        local count = redis.call('hincrby', Keys.recurring(jid), 'count', 1)
        Queue.put(run_at, '', queue, jid .. '-' .. count, template.klass, data, 0, options, jid)
        run_at = run_at + template.interval
      end
      redis.call('zadd', recur, run_at, jid)
    end
  end
end
