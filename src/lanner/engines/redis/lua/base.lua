-------------------------------------------------------------------------------
-- base.lua: module tables, errors, argument checks, key names, JSON helpers.
-------------------------------------------------------------------------------
-- Every name in this script is local. Redis 7 makes a script's globals
-- read-only, so `function table.extend` or a global helper would fail there.
-- The modules are plain tables declared up front, so that a function in one
-- file can call into a module whose file comes later in the concatenation.
local Config, Events, Stats, Worker = {}, {}, {}, {}
local Job, Queue, Recurring, Limits, Lanner, Flow = {}, {}, {}, {}, {}, {}

-- qless scores a waiting job `priority - ready_at / SCORE_TIME_SCALE`, read
-- highest first: a higher priority wins, and among equal priorities the job
-- that became ready earlier wins. Dividing by 1e10 keeps the time term below 1
-- for any timestamp before the year 2286, so it never outweighs a priority step.
-- (lanner places jobs so that ties are in put order too: see Queue.place.)
local SCORE_TIME_SCALE = 1e10

local DAY = 86400

-- The states of a job that is not finished: it holds a place in its queue,
-- which LIMITS counts (ql:lanner:usage:<queue>) and lanner's if_exists sees.
local LIVE = { waiting = true, scheduled = true, depends = true, running = true, stalled = true }

-- A job in state depends carrying this tag fails when a dependency fails
-- (Job.fail_dependents), into the DEPENDENCY_FAILED group: lanner.job's
-- CASCADE_TAG and DEPENDENCY_FAILED_GROUP. Looked for in the job's JSON tags
-- as a whole element, quotes included.
local CASCADE_TAG_JSON = '"lanner:fails-with-dependency"'
local DEPENDENCY_FAILED = 'lanner-dependency-failed'

-------------------------------------------------------------------------------
-- Per-call state
-------------------------------------------------------------------------------
-- Some modules remember things for the length of one command (settings read,
-- queues seen, timings to write at the end). Run by EVALSHA, the script's top
-- level runs afresh on every call, so that state starts empty anyway. Loaded
-- as a Redis function library (see `lanner redis-script --function`), the top
-- level runs once and its locals outlive a call: so every such module
-- registers here how its state starts, and the entry point (api_lanner.lua) starts
-- them all before each command.
local call_starts = {}

local function per_call(start)
  call_starts[#call_starts + 1] = start
  start()
end

local function start_call()
  for index = 1, #call_starts do
    call_starts[index]()
  end
end

-------------------------------------------------------------------------------
-- Errors
-------------------------------------------------------------------------------
-- A failed check raises an error whose message is also kept in
-- `Raised.message`. The dispatcher (api_lanner.lua) catches it and returns that
-- message as a plain Redis error reply, without the script location Redis
-- would otherwise add. (The message is kept on the side because what pcall
-- hands back differs: Redis 6.2 gives the error table, Redis 7 a string.)
-- Any other Lua error is a bug and is reported as such. The wording is part
-- of the protocol: clients recognise the families listed in the header.
local Raised = { message = nil }
per_call(function()
  Raised.message = nil
end)

local function raise(fmt, ...)
  Raised.message = string.format(fmt, ...)
  error({ err = Raised.message })
end

-------------------------------------------------------------------------------
-- Numbers
-------------------------------------------------------------------------------
local Num = {}

-- Full-precision text for a number. Lua's tostring keeps only 14 significant
-- digits, which is not enough for a score range such as '(1700000000.123456'.
function Num.str(value)
  if value == math.floor(value) and math.abs(value) < 1e15 then
    return string.format('%d', value)
  end
  return string.format('%.17g', value)
end

-- A finite number, or nil. Lua's tonumber also accepts 'inf' and 'nan'.
function Num.finite(value)
  local number = tonumber(value)
  if number == nil or number ~= number or number == math.huge or number == -math.huge then
    return nil
  end
  return number
end

-------------------------------------------------------------------------------
-- Argument checks
-------------------------------------------------------------------------------
-- Arguments are checked before anything is written: a script cannot roll back,
-- so a command that fails half way would leave the data inconsistent.
-- Every message starts with 'Malformed <name>' so a client can map the family.
local Args = {}

function Args.string(value, name)
  if value == nil or value == '' then
    raise('Malformed %s: a non-empty string is required', name)
  end
  return value
end

-- Like Args.string, but the empty string is allowed (a worker name for put).
function Args.text(value, name)
  if value == nil then
    raise('Malformed %s: missing', name)
  end
  return value
end

function Args.number(value, name)
  if value == nil then
    raise('Malformed %s: missing', name)
  end
  local number = Num.finite(value)
  if number == nil then
    raise('Malformed %s: not a finite number: %s', name, tostring(value))
  end
  return number
end

function Args.optional_number(value, name, default)
  if value == nil then
    return default
  end
  return Args.number(value, name)
end

-- A non-negative integer such as a count or an offset. Without a default the
-- argument is required.
function Args.count(value, name, default)
  if value == nil and default ~= nil then
    return default
  end
  local number = Args.number(value, name)
  if number < 0 or number ~= math.floor(number) then
    raise('Malformed %s: not a non-negative integer: %s', name, tostring(value))
  end
  return number
end

function Args.json(value, name)
  if value == nil then
    raise('Malformed %s: missing', name)
  end
  local ok, decoded = pcall(cjson.decode, value)
  if not ok then
    raise('Malformed %s: not valid JSON: %s', name, value)
  end
  return decoded
end

-- A JSON array of strings (numbers are accepted and turned into strings, as
-- clients often send numeric tags or jids). Duplicates are dropped, keeping
-- the first occurrence, so the order a client gave is preserved.
function Args.string_list(value, name)
  return Args.strings(Args.json(value, name), name)
end

-- Args.string_list of a value already decoded (a field of a JSON argument).
function Args.strings(decoded, name)
  local function malformed(what)
    raise('Malformed %s: %s: %s', name, what, cjson.encode(decoded))
  end
  if type(decoded) ~= 'table' then
    malformed('a JSON array is required')
  end
  local size, keys = #decoded, 0
  for _ in pairs(decoded) do
    keys = keys + 1
  end
  if keys ~= size then
    malformed('a JSON array is required')
  end
  local list, seen = {}, {}
  for _, item in ipairs(decoded) do
    if type(item) == 'number' then
      item = tostring(item)
    end
    if type(item) ~= 'string' or item == '' then
      malformed('items must be non-empty strings')
    end
    if not seen[item] then
      seen[item] = true
      list[#list + 1] = item
    end
  end
  return list
end

-- A JSON object (an empty '{}' or '[]' counts as an empty object).
function Args.json_object(value, name)
  local decoded = Args.json(value, name)
  if type(decoded) ~= 'table' then
    raise('Malformed %s: a JSON object is required: %s', name, value)
  end
  return decoded
end

-- Optional key/value pairs after the positional arguments, such as
-- `priority 5 tags ["a"]`. `parsers` maps each known option name to a checker.
-- An unknown name or a missing value is an error rather than being ignored, so
-- a misspelt option cannot silently do nothing.
function Args.options(args, first, parsers)
  local options = {}
  local index = first
  while args[index] ~= nil do
    local key, value = args[index], args[index + 1]
    local parse = parsers[key]
    if parse == nil then
      raise('Malformed option: unknown option %s', tostring(key))
    end
    if value == nil then
      raise('Malformed %s: missing value', key)
    end
    options[key] = parse(value, key)
    index = index + 2
  end
  return options
end

-- The arguments from `first` on, as a list (for commands taking many jids).
function Args.rest(args, first, name)
  local list = {}
  for index = first, #args do
    list[#list + 1] = Args.string(args[index], name)
  end
  return list
end

-------------------------------------------------------------------------------
-- Key names (the layout is documented in the header)
-------------------------------------------------------------------------------
local Keys = {}

-- Every key starts with P: 'ql:' on one Redis, as qless lays keys out. On Redis
-- Cluster each call declares one key, its partition 'ql:{<tag>}', and P becomes
-- 'ql:{<tag>}:' for that call (Keys.use, from main), so that every key the call
-- touches hashes to the partition's slot.
local P = 'ql:'

function Keys.job(jid) return P .. 'j:' .. jid end
function Keys.history(jid) return P .. 'j:' .. jid .. '-history' end
function Keys.dependencies(jid) return P .. 'j:' .. jid .. '-dependencies' end
function Keys.dependents(jid) return P .. 'j:' .. jid .. '-dependents' end
-- kind is one of work, scheduled, locks, depends, recur
function Keys.queue(queue, kind) return P .. 'q:' .. queue .. '-' .. kind end
function Keys.worker_jobs(worker) return P .. 'w:' .. worker .. ':jobs' end
function Keys.tag(tag) return P .. 't:' .. tag end
function Keys.failed(group) return P .. 'f:' .. group end
function Keys.recurring(jid) return P .. 'r:' .. jid end
-- kind is wait, run (timings) or stats (counters); day is a midnight timestamp
function Keys.stats(kind, day, queue) return P .. 's:' .. kind .. ':' .. Num.str(day) .. ':' .. queue end
function Keys.notify(queue) return P .. 'lanner:notify:' .. queue end
function Keys.waiting(queue) return P .. 'lanner:waiting:' .. queue end
function Keys.waiting_counts(queue) return P .. 'lanner:waiting-count:' .. queue end
function Keys.handoff(queue, worker) return P .. 'lanner:handoff:' .. queue .. ':' .. worker end
function Keys.finished(jid) return P .. 'lanner:finished:' .. jid end
function Keys.usage(queue) return P .. 'lanner:usage:' .. queue end
function Keys.children(parent) return P .. 'lanner:children:' .. parent end
-- FLOW: a queue's jobs held by a concurrency key (-flow marks a queue that has
-- flow jobs; -parked maps its keys with held jobs to their caps); a key's
-- slots and a rate bucket's starts are shared by every queue (of the partition,
-- on Redis Cluster, where the engine refuses FLOW: see cluster/engine.py).
function Keys.parked(queue, key) return Keys.queue(queue, 'parked') .. ':' .. key end
function Keys.flow_slots(key) return P .. 'lanner:flow:slots:' .. key end
function Keys.flow_starts(bucket) return P .. 'lanner:flow:starts:' .. bucket end
function Keys.flow_holds(bucket) return P .. 'lanner:flow:holds:' .. bucket end

-- The keys that are names, not functions, rebuilt when the prefix changes.
function Keys.use(prefix)
  P = prefix
  Keys.prefix = prefix
  Keys.awaited = P .. 'lanner:awaited'
  Keys.seq = P .. 'lanner:seq'
  Keys.queues = P .. 'queues'
  Keys.paused = P .. 'paused_queues'
  Keys.workers = P .. 'workers'
  Keys.failures = P .. 'failures'
  Keys.completed = P .. 'completed'
  Keys.tracked = P .. 'tracked'
  Keys.tags = P .. 'tags'
  Keys.config = P .. 'config'
  Keys.moving = P .. 'lanner:moving'
  Keys.flow_keys = P .. 'lanner:flow:keys'
  Keys.flow_buckets = P .. 'lanner:flow:buckets'
end
Keys.use('ql:')

-- The partition a call declares on Redis Cluster ('ql:{<tag>}'), or nil: one Redis,
-- where qless's convention holds (no keys). Anything else is refused.
function Keys.partition(keys)
  if #keys == 0 then return nil end
  if #keys == 1 and string.match(keys[1], '^ql:{[^{}]+}$') then return keys[1] end
  return false
end

-------------------------------------------------------------------------------
-- JSON output
-------------------------------------------------------------------------------
local Json = {}

-- An object whose keys come out in the order given: fields = {k1, v1, k2, ...}.
-- Event payloads are compared byte for byte by existing clients and tests, and
-- cjson's own key order depends on Lua's hash layout, so they are built here.
function Json.ordered(fields)
  local parts = {}
  for index = 1, #fields, 2 do
    parts[#parts + 1] = cjson.encode(fields[index]) .. ':' .. cjson.encode(fields[index + 1])
  end
  return '{' .. table.concat(parts, ',') .. '}'
end

-- An array for storage. cjson writes an empty table as '{}'; stored fields
-- such as a job's tags keep the '[]' a JSON reader expects.
function Json.array(list)
  if #list == 0 then
    return '[]'
  end
  return cjson.encode(list)
end

-- Decode a stored JSON field, falling back to `default` (else a new empty
-- table) when it is absent. An empty array needs no decoding.
function Json.decode(value, default)
  if value == nil or value == false or value == '' then
    if default == nil then
      return {}
    end
    return default
  end
  if value == '[]' then
    return {}
  end
  return cjson.decode(value)
end

-- redis.call(command, key, items...) in chunks: Lua's unpack cannot spread a
-- long list into arguments. `step` (even for score/member pairs) is the most
-- items per call. For commands whose effect is the same in one call or many.
local function call_spread(command, key, items, step)
  for first = 1, #items, step do
    redis.call(command, key, unpack(items, first, math.min(first + step - 1, #items)))
  end
end

-- Redis returns a missing value as false; the rest of the script uses nil.
local function present(value)
  if value == false then
    return nil
  end
  return value
end

-- The day (a midnight UTC timestamp) that contains time `when`.
local function day_of(when)
  return when - (when % DAY)
end
