-------------------------------------------------------------------------------
-- api_lanner.lua: the lanner.* commands, and the script's entry point.
-------------------------------------------------------------------------------
-- The same shape as api.lua's entries (its Api table, filled on here).

-------------------------------------------------------------------------------
-- lanner's extensions (see lanner.lua)
-------------------------------------------------------------------------------
-- lanner.put_many worker JSON: a JSON array of objects {queue, jid, klass,
-- data (JSON text), delay, priority, tags, retries, depends}, each checked
-- like the arguments of put before any is stored. Returns the jids (array).

-- A name given as a JSON number reads as put would read it as an argument.
local function spec_string(value, name)
  if type(value) == 'number' then
    value = Num.str(value)
  elseif value ~= nil and type(value) ~= 'string' then
    raise('Malformed %s: a non-empty string is required', name)
  end
  return Args.string(value, name)
end

local function parse_spec(worker, spec)
  if type(spec) ~= 'table' then
    raise('Malformed jobs: each job must be a JSON object')
  end
  local data = spec.data or '{}'
  if type(data) ~= 'string' then
    raise('Malformed data: must be JSON text (a string) in lanner.put_many')
  end
  local options = {}
  if spec.priority ~= nil then
    options.priority = Args.number(spec.priority, 'priority')
  end
  if spec.tags ~= nil then
    options.tags = Args.strings(spec.tags, 'tags')
  end
  if spec.retries ~= nil then
    options.retries = Args.count(spec.retries, 'retries')
  end
  if spec.depends ~= nil then
    options.depends = Args.strings(spec.depends, 'depends')
  end
  if spec.if_exists ~= nil then
    options.if_exists = if_exists(spec.if_exists, 'if_exists')
  end
  if spec.expires_at ~= nil then
    options.expires_at = Args.number(spec.expires_at, 'expires_at')
  end
  if spec.flow ~= nil then
    options.flow = flow_spec(spec.flow, 'flow')
  end
  return {
    worker = worker,
    queue = spec_string(spec.queue, 'queue'),
    jid = spec_string(spec.jid, 'jid'),
    klass = spec_string(spec.klass, 'klass'),
    data = job_data(data, 'data'),
    delay = Args.number(spec.delay or 0, 'delay'),
    options = options,
  }
end

Api['lanner.put_many'] = function(now, args)
  local worker = Args.text(args[1], 'worker')
  local specs = Args.json(args[2], 'jobs')
  if type(specs) ~= 'table' then
    raise('Malformed jobs: a JSON array is required')
  end
  local parsed = {}
  for index, spec in ipairs(specs) do
    parsed[index] = parse_spec(worker, spec)
  end
  return Limits.put(now, parsed, true)
end

-- lanner.complete_many worker queue jid...
Api['lanner.complete_many'] = function(now, args)
  local worker = Args.string(args[1], 'worker')
  local queue = Args.string(args[2], 'queue')
  return Lanner.complete_many(now, worker, queue, Args.rest(args, 3, 'jid'))
end

-- lanner.complete_results worker queue RESULTS jid...: lanner.complete_many,
-- each completed job keeping its result from RESULTS, a JSON object jid ->
-- JSON text.
Api['lanner.complete_results'] = function(now, args)
  local worker = Args.string(args[1], 'worker')
  local queue = Args.string(args[2], 'queue')
  local results = Args.json(args[3], 'results')
  if type(results) ~= 'table' then
    raise('Malformed results: a JSON object is required')
  end
  for jid, result in pairs(results) do
    if type(result) ~= 'string' then
      raise('Malformed results: the result of %s must be JSON text (a string)', jid)
    end
    job_data(result, 'result')
  end
  return Lanner.complete_many(now, worker, queue, Args.rest(args, 4, 'jid'), results)
end

-- lanner.multiget jid...: multiget, each job with lanner's fields (result, due)
Api['lanner.multiget'] = function(_, args)
  local result = {}
  for _, jid in ipairs(Args.rest(args, 1, 'jid')) do
    result[#result + 1] = Lanner.object(jid)
  end
  return cjson.encode(result)
end

-- lanner.outcomes jid...: [jid, state, result or false, failure JSON or false] of
-- each job that exists, in the order asked (one HMGET each, nothing else read)
Api['lanner.outcomes'] = function(_, args)
  local found = {}
  for _, jid in ipairs(Args.rest(args, 1, 'jid')) do
    local state, result, failure = unpack(redis.call('hmget', Keys.job(jid),
      'state', 'result', 'failure'))
    if state then
      found[#found + 1] = { jid, state, present(result) or false, present(failure) or false }
    end
  end
  return cjson.encode(found)
end

-- lanner.await jid till: {'finished', JSON job} | {'gone'} | {'pending'}
Api['lanner.await'] = function(_, args)
  local jid = Args.string(args[1], 'jid')
  local till = Args.number(args[2], 'till')
  local state, object = Lanner.await(jid, till)
  if object ~= nil then
    return { state, cjson.encode(object) }
  end
  return { state }
end

-- lanner.release worker queue jid...: lanner.release_in without a delay
Api['lanner.release'] = function(now, args)
  local worker = Args.string(args[1], 'worker')
  local queue = Args.string(args[2], 'queue')
  return Lanner.release(now, worker, queue, 0, Args.rest(args, 3, 'jid'), false)
end

-- lanner.pop_wait queue worker count wait: {JSON list of jobs, next_due or nil}
Api['lanner.pop_wait'] = function(now, args)
  local queue = Args.string(args[1], 'queue')
  local worker = Args.string(args[2], 'worker')
  local count = Args.count(args[3], 'count', nil)
  local wait = Args.number(args[4], 'wait')
  local jobs = Lanner.pop_wait(now, queue, worker, count, wait)
  if #jobs > 0 then
    return { Job.texts_array(jobs) }
  end
  return { '[]', Lanner.next_due(queue) }
end

-- lanner.next_due queue
Api['lanner.next_due'] = function(_, args)
  return Lanner.next_due(Args.string(args[1], 'queue'))
end

-- lanner.release_in worker queue delay jid...
Api['lanner.release_in'] = function(now, args)
  local worker = Args.string(args[1], 'worker')
  local queue = Args.string(args[2], 'queue')
  local delay = Args.number(args[3], 'delay')
  return Lanner.release(now, worker, queue, delay, Args.rest(args, 4, 'jid'), false)
end

-- lanner.release_tried worker queue delay jid...: release_in, each job spending a retry
Api['lanner.release_tried'] = function(now, args)
  local worker = Args.string(args[1], 'worker')
  local queue = Args.string(args[2], 'queue')
  local delay = Args.number(args[3], 'delay')
  return Lanner.release(now, worker, queue, delay, Args.rest(args, 4, 'jid'), true)
end

-- lanner.peek queue count: JSON list of the jobs pop would give next (read-only)
Api['lanner.peek'] = function(now, args)
  local queue = Args.string(args[1], 'queue')
  local count = Args.count(args[2], 'count', nil)
  local result = {}
  for _, jid in ipairs(Lanner.peek(now, queue, count)) do
    result[#result + 1] = Job.get(jid)
  end
  return cjson.encode(result)
end

-- lanner.usage queue: {items, bytes, total, expired, discarded} (LIMITS)
Api['lanner.usage'] = function(_, args)
  return Limits.usage(Args.string(args[1], 'queue'))
end

-- lanner.flow_state: JSON {keys: [[key, running, cap, held]...], buckets:
-- [[bucket, limit, period, recent, held, next_at]...]} (FLOW)
Api['lanner.flow_state'] = function(now, _)
  return cjson.encode(Flow.state(now))
end

-- lanner.cancel jid...: array of the jids cancelled
Api['lanner.cancel'] = function(now, args)
  return Lanner.cancel(now, Args.rest(args, 1, 'jid'))
end

-- lanner.heartbeat jid worker [data]: the new lock expiry as text (qless's
-- heartbeat replies with an integer, dropping the fraction)
Api['lanner.heartbeat'] = function(now, args)
  local jid = Args.string(args[1], 'jid')
  local worker = Args.string(args[2], 'worker')
  local data = optional_job_data(args[3], 'data')
  return Num.str(Job.heartbeat(now, jid, worker, data))
end

-- lanner.heartbeat_many worker jid...: {jid, expiry as text, ...} of the
-- locks renewed
-- Redis Cluster: the lanner.move_* commands (cluster.lua); moving in is a put.
-- (A function library's top level has no `pairs`: each is named.)
Move.put_many = Api['lanner.put_many']
Api['lanner.move_out'] = Move.api['lanner.move_out']
Api['lanner.complete_out'] = Move.api['lanner.complete_out']
Api['lanner.move_pending'] = Move.api['lanner.move_pending']
Api['lanner.move_in'] = Move.api['lanner.move_in']
Api['lanner.move_done'] = Move.api['lanner.move_done']
Api['lanner.flow_claim'] = Move.api['lanner.flow_claim']

Api['lanner.heartbeat_many'] = function(now, args)
  local worker = Args.string(args[1], 'worker')
  return Lanner.heartbeat_many(now, worker, Args.rest(args, 2, 'jid'))
end

-------------------------------------------------------------------------------
-- Entry point
-------------------------------------------------------------------------------
-- EVALSHA <sha> 0 <command> <now> <args...>, or FCALL <function> 0 ... when
-- loaded as a function library (the script's last line says which).
local function main(keys, argv)
  start_call()
  local partition = Keys.partition(keys)
  if partition == false then
    return redis.error_reply('No Keys should be provided')
  end
  -- A function library keeps its state between calls: set the prefix every time.
  local prefix = partition and (partition .. ':') or 'ql:'
  if prefix ~= Keys.prefix then
    Keys.use(prefix)
  end
  local command = argv[1]
  local handler = command and Api[command]
  if handler == nil then
    return redis.error_reply('Unknown command ' .. tostring(command))
  end
  local now
  local ok, result = pcall(function()
    now = Args.number(argv[2], 'now')
    local args = {}
    for index = 3, #argv do
      args[#args + 1] = argv[index]
    end
    return handler(now, args)
  end)
  -- Writes the modules defer to the end of the command (jobs for -work, then
  -- hand-offs, which pop them, and wake-up tokens, then timings, which
  -- hand-offs add to), also after an error, as the writes before it stay.
  -- Nothing is deferred before `now` is known.
  local flushed, problem = true, nil
  if now ~= nil then
    flushed, problem = pcall(function()
      Queue.flush()
      Lanner.flush(now)
      Limits.flush()
      Stats.flush()
    end)
  end
  if ok and not flushed then
    ok, result = false, problem
  end
  if ok then
    return result
  end
  if Raised.message ~= nil then
    return redis.error_reply(Raised.message)
  end
  -- A failing Redis command (an error table) or a bug in this script (a
  -- string); say which command hit it.
  if type(result) == 'table' then
    result = result.err
  end
  return redis.error_reply('Internal error in ' .. command .. ': ' .. tostring(result))
end

return main(KEYS, ARGV)
