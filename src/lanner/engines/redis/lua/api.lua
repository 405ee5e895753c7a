-------------------------------------------------------------------------------
-- api.lua: qless's commands, as clients call them (lanner's and the entry point
-- are api_lanner.lua's).
-------------------------------------------------------------------------------
-- Each entry takes (now, args), where args are the arguments after `now`, all
-- strings. It checks and converts every argument first, then calls into the
-- modules above, then shapes the reply: tables go out as JSON text (Redis
-- replies cannot carry maps), plain lists of jids as Redis arrays.
local Api = {}

local function json_or_nil(value)
  if value == nil then
    return nil
  end
  return cjson.encode(value)
end

-- Job data given by the client: any JSON text, stored as given. For the
-- commands where data is optional, '' (or leaving it out) keeps the old data.
local function job_data(value, name)
  Args.json(value, name)
  return value
end

local function optional_job_data(value, name)
  if value == nil or value == '' then
    return nil
  end
  return job_data(value, name)
end

-- lanner's if_exists option: what to do with a live job of the same jid.
local function if_exists(value, name)
  value = Args.string(value, name)
  if value ~= 'move' and value ~= 'keep' and value ~= 'move-unless-running'
      and value ~= 'once' and value ~= 'keep-waiting' then
    raise('Malformed %s: move, keep, move-unless-running, once or keep-waiting is required, '
      .. 'not %s', name, value)
  end
  return value
end

-- FLOW's put option: JSON text {c = key, m = cap, r = {{bucket, limit,
-- period}, ...}}, kept as given once its shape is checked.
local function flow_spec(value, name)
  local spec = Args.json(value, name)
  local valid = type(spec) == 'table' and (spec.c == nil
    or (type(spec.c) == 'string' and spec.c ~= '' and type(spec.m) == 'number' and spec.m >= 1))
    and (spec.f == nil or (type(spec.f) == 'string' and spec.f ~= ''))
  for _, rate in ipairs(valid and spec.r or {}) do
    valid = valid and type(rate) == 'table' and type(rate[1]) == 'string' and rate[1] ~= ''
      and type(rate[2]) == 'number' and rate[2] >= 1 and type(rate[3]) == 'number'
      and rate[3] > 0
  end
  if not valid then
    raise('Malformed %s: {c: key, m: cap, r: [[bucket, limit, period]...], f: key} is required',
      name)
  end
  return value
end

local PUT_OPTIONS = {
  priority = Args.number,
  tags = Args.string_list,
  retries = Args.count,
  depends = Args.string_list,
  if_exists = if_exists,
  expires_at = Args.number,
  flow = flow_spec,
}

-------------------------------------------------------------------------------
-- Configuration
-------------------------------------------------------------------------------
Api['config.get'] = function(_, args)
  if args[1] == nil then
    return cjson.encode(Config.all())
  end
  return Config.get(Args.string(args[1], 'key'))
end

Api['config.set'] = function(_, args)
  Config.set(Args.string(args[1], 'key'), Args.text(args[2], 'value'))
end

Api['config.unset'] = function(_, args)
  Config.unset(Args.string(args[1], 'key'))
end

-------------------------------------------------------------------------------
-- Jobs
-------------------------------------------------------------------------------
Api.get = function(_, args)
  return json_or_nil(Job.get(Args.string(args[1], 'jid')))
end

Api.multiget = function(_, args)
  local result = {}
  for _, jid in ipairs(Args.rest(args, 1, 'jid')) do
    result[#result + 1] = Job.get(jid)
  end
  return cjson.encode(result)
end

-- put worker queue jid klass data delay [priority p] [tags t] [retries r] [depends d]
local function parse_put(args)
  return {
    worker = Args.text(args[1], 'worker'),
    queue = Args.string(args[2], 'queue'),
    jid = Args.string(args[3], 'jid'),
    klass = Args.string(args[4], 'klass'),
    data = job_data(args[5], 'data'),
    delay = Args.number(args[6], 'delay'),
    options = Args.options(args, 7, PUT_OPTIONS),
  }
end

-- Bounds (LIMITS) and copies into fanout children (FANOUT) are Limits.put's.
Api.put = function(now, args)
  return Limits.put_one(now, parse_put(args))
end

-- Like put, for a job that must already exist.
Api.requeue = function(now, args)
  local p = parse_put(args)
  Job.require(p.jid)
  return Limits.put_one(now, p)
end

Api.pop = function(now, args)
  local queue = Args.string(args[1], 'queue')
  local worker = Args.string(args[2], 'worker')
  local count = Args.count(args[3], 'count', nil)
  return Job.texts_array(Queue.pop(now, queue, worker, count))
end

Api.peek = function(now, args)
  local queue = Args.string(args[1], 'queue')
  local count = Args.count(args[2], 'count', nil)
  return cjson.encode(Queue.peek(now, queue, count))
end

Api.heartbeat = function(now, args)
  local jid = Args.string(args[1], 'jid')
  local worker = Args.string(args[2], 'worker')
  local data = optional_job_data(args[3], 'data')
  return Job.heartbeat(now, jid, worker, data)
end

-- complete jid worker queue data [next q] [delay d] [depends d]
Api.complete = function(now, args)
  local jid = Args.string(args[1], 'jid')
  local worker = Args.string(args[2], 'worker')
  local queue = Args.string(args[3], 'queue')
  local data = optional_job_data(args[4], 'data')
  local options = Args.options(args, 5, {
    ['next'] = Args.string,
    delay = Args.number,
    depends = Args.string_list,
    result = job_data,
  })
  if options.next == nil and (options.delay ~= nil or options.depends ~= nil) then
    raise('Malformed next: delay and depends need a next queue')
  end
  return Job.complete(now, jid, worker, queue, data, options)
end

Api.fail = function(now, args)
  local jid = Args.string(args[1], 'jid')
  local worker = Args.string(args[2], 'worker')
  local group = Args.string(args[3], 'group')
  local message = Args.text(args[4], 'message')
  local data = optional_job_data(args[5], 'data')
  return Job.fail(now, jid, worker, group, message, data)
end

-- retry jid queue worker [delay] [group] [message]
Api.retry = function(now, args)
  local jid = Args.string(args[1], 'jid')
  local queue = Args.string(args[2], 'queue')
  local worker = Args.string(args[3], 'worker')
  local delay = Args.optional_number(args[4], 'delay', 0)
  local group = args[5]
  if group == '' then
    group = nil
  end
  return Job.retry(now, jid, queue, worker, delay, group, args[6])
end

-- depends jid on jid... | depends jid off jid... | depends jid off all
Api.depends = function(now, args)
  local jid = Args.string(args[1], 'jid')
  local direction = args[2]
  local jids = Args.rest(args, 3, 'jid')
  if direction == 'on' then
    return Job.depends_on(jid, jids)
  elseif direction == 'off' then
    if jids[1] == 'all' then
      return Job.depends_off(now, jid, nil)
    end
    return Job.depends_off(now, jid, jids)
  end
  raise('Malformed direction: expected on or off, got %s', tostring(direction))
end

Api.cancel = function(now, args)
  return Job.cancel(now, Args.rest(args, 1, 'jid'))
end

Api.timeout = function(now, args)
  Job.timeout(now, Args.rest(args, 1, 'jid'))
end

Api.priority = function(_, args)
  local jid = Args.string(args[1], 'jid')
  return Job.set_priority(jid, Args.number(args[2], 'priority'))
end

Api.log = function(now, args)
  local jid = Args.string(args[1], 'jid')
  local message = Args.string(args[2], 'message')
  local data
  if args[3] ~= nil then
    data = Args.json_object(args[3], 'data')
  end
  return Job.log(now, jid, message, data)
end

-- tag add jid tag... | tag remove jid tag... | tag get tag [offset] [count]
-- | tag top [offset] [count]. Every reply is JSON.
Api.tag = function(now, args)
  local command = args[1]
  if command == 'add' then
    local jid = Args.string(args[2], 'jid')
    return cjson.encode(Job.tag(now, jid, Args.rest(args, 3, 'tag')))
  elseif command == 'remove' then
    local jid = Args.string(args[2], 'jid')
    return cjson.encode(Job.untag(jid, Args.rest(args, 3, 'tag')))
  elseif command == 'get' then
    local tag = Args.string(args[2], 'tag')
    local offset = Args.count(args[3], 'offset', 0)
    local count = Args.count(args[4], 'count', 25)
    return cjson.encode(Job.tagged(tag, offset, count))
  elseif command == 'top' then
    local offset = Args.count(args[2], 'offset', 0)
    local count = Args.count(args[3], 'count', 25)
    return cjson.encode(Job.top_tags(offset, count))
  end
  raise('Malformed tag command: expected add, remove, get or top, got %s', tostring(command))
end

-- track | track track jid | track untrack jid. Every reply is JSON.
Api.track = function(now, args)
  local command = args[1]
  if command == nil then
    return cjson.encode(Job.tracked())
  elseif command == 'track' then
    return cjson.encode(Job.track(now, Args.string(args[2], 'jid')))
  elseif command == 'untrack' then
    return cjson.encode(Job.untrack(Args.string(args[2], 'jid')))
  end
  raise('Malformed track command: expected track or untrack, got %s', tostring(command))
end

-------------------------------------------------------------------------------
-- Queues
-------------------------------------------------------------------------------
Api.queues = function(now, args)
  if args[1] ~= nil then
    return cjson.encode(Queue.counts(now, Args.string(args[1], 'queue')))
  end
  return cjson.encode(Queue.all_counts(now))
end

Api.length = function(_, args)
  return Queue.length(Args.string(args[1], 'queue'))
end

-- jobs complete [offset] [count] | jobs <state> queue [offset] [count]
Api.jobs = function(now, args)
  local state = args[1]
  if state == 'complete' then
    return Queue.completed(Args.count(args[2], 'offset', 0), Args.count(args[3], 'count', 25))
  end
  local queue = Args.string(args[2], 'queue')
  local offset = Args.count(args[3], 'offset', 0)
  local count = Args.count(args[4], 'count', 25)
  local jids = Queue.jobs(now, state, queue, offset, count)
  if jids == nil then
    raise('Malformed state: unknown job state %s', tostring(state))
  end
  return jids
end

Api.pause = function(_, args)
  Queue.pause(Args.rest(args, 1, 'queue'))
end

Api.unpause = function(_, args)
  Queue.unpause(Args.rest(args, 1, 'queue'))
end

Api['queue.forget'] = function(_, args)
  Queue.forget(Args.rest(args, 1, 'queue'))
end

-- failed | failed group [start] [limit]
Api.failed = function(_, args)
  if args[1] == nil then
    return cjson.encode(Queue.failed_groups())
  end
  local group = Args.string(args[1], 'group')
  local start = Args.count(args[2], 'start', 0)
  local limit = Args.count(args[3], 'limit', 25)
  return cjson.encode(Queue.failed(group, start, limit))
end

Api.unfail = function(now, args)
  local queue = Args.string(args[1], 'queue')
  local group = Args.string(args[2], 'group')
  local count = Args.count(args[3], 'count', 25)
  return Queue.unfail(now, queue, group, count)
end

Api.stats = function(_, args)
  local queue = Args.string(args[1], 'queue')
  local date = Args.number(args[2], 'date')
  return cjson.encode(Stats.get(queue, date))
end

-------------------------------------------------------------------------------
-- Workers
-------------------------------------------------------------------------------
Api.workers = function(now, args)
  if args[1] ~= nil then
    return cjson.encode(Worker.jobs(now, Args.string(args[1], 'worker')))
  end
  return cjson.encode(Worker.list(now))
end

Api['worker.deregister'] = function(_, args)
  Worker.deregister(Args.rest(args, 1, 'worker'))
end

-------------------------------------------------------------------------------
-- Recurring jobs
-------------------------------------------------------------------------------
local RECUR_OPTIONS = {
  priority = Args.number,
  tags = Args.string_list,
  retries = Args.count,
  backlog = Args.count,
}

local function interval(value, name)
  local seconds = Args.number(value, name)
  if seconds <= 0 then
    raise('Malformed %s: must be positive: %s', name, tostring(value))
  end
  return seconds
end

-- recur queue jid klass data interval <seconds> <offset> [priority p] [tags t]
-- [retries r] [backlog b]
Api.recur = function(now, args)
  local queue = Args.string(args[1], 'queue')
  local jid = Args.string(args[2], 'jid')
  local klass = Args.string(args[3], 'klass')
  local data = job_data(args[4], 'data')
  if args[5] ~= 'interval' then
    raise('Malformed schedule: only "interval" is supported, got %s', tostring(args[5]))
  end
  local seconds = interval(args[6], 'interval')
  local offset = Args.number(args[7], 'offset')
  local options = Args.options(args, 8, RECUR_OPTIONS)
  return Recurring.recur(now, queue, jid, klass, data, seconds, offset, options)
end

Api.unrecur = function(_, args)
  return Recurring.unrecur(Args.string(args[1], 'jid'))
end

Api['recur.get'] = function(_, args)
  return json_or_nil(Recurring.get(Args.string(args[1], 'jid')))
end

-- recur.update jid key value [key value ...]
Api['recur.update'] = function(now, args)
  local jid = Args.string(args[1], 'jid')
  local changes = Args.options(args, 2, {
    priority = Args.number,
    interval = interval,
    retries = Args.count,
    data = job_data,
    klass = Args.string,
    queue = Args.string,
    backlog = Args.count,
  })
  return Recurring.update(now, jid, changes)
end

Api['recur.tag'] = function(_, args)
  local jid = Args.string(args[1], 'jid')
  return cjson.encode(Recurring.tag(jid, Args.rest(args, 2, 'tag')))
end

Api['recur.untag'] = function(_, args)
  local jid = Args.string(args[1], 'jid')
  return cjson.encode(Recurring.untag(jid, Args.rest(args, 2, 'tag')))
end
