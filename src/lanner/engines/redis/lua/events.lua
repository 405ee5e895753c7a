-------------------------------------------------------------------------------
-- events.lua: PUBLISH on the ql:* channels.
-------------------------------------------------------------------------------
-- Three kinds of channel:
--   ql:log          JSON, one message per state change, for every job;
--   ql:w:<worker>   JSON, for the worker that loses a job (lock_lost, canceled);
--   ql:<event>      the bare jid, only for tracked jobs (put, popped, stalled,
--                   completed, failed, canceled) plus ql:track / ql:untrack.
-- Key order inside the JSON payloads is fixed (see Json.ordered): clients
-- compare them as text.

local function publish(channel, message)
  redis.call('publish', 'ql:' .. channel, message)
end

-- fields = {k1, v1, k2, v2, ...}, in payload order
function Events.log(fields)
  publish('log', Json.ordered(fields))
end

-- Whether ql:tracked has any member, read once per call: most deployments
-- track nothing, and then no job needs its own ZSCORE. `track` resets it.
local any_tracked
per_call(function()
  any_tracked = nil
end)

-- Whether the job is tracked.
function Events.is_tracked(jid)
  if any_tracked == nil then
    any_tracked = redis.call('zcard', Keys.tracked) > 0
  end
  return any_tracked and redis.call('zscore', Keys.tracked, jid) ~= false
end

-- ql:tracked gained a member.
function Events.tracking_changed()
  any_tracked = nil
end

-- The jid alone on ql:<channel>, if the job is tracked.
function Events.tracked(jid, channel)
  if Events.is_tracked(jid) then
    publish(channel, jid)
  end
end

-- Track and untrack are announced whether or not anybody tracks the job.
function Events.bare(channel, jid)
  publish(channel, jid)
end

-- A worker lost its lock (timeout, expiry, or the job was moved by someone
-- else): the worker hears it first on its own channel, then the log.
function Events.lock_lost(jid, worker)
  local message = Json.ordered({ 'jid', jid, 'event', 'lock_lost', 'worker', worker })
  publish('w:' .. worker, message)
  publish('log', message)
end

-- put and completed are sent once per job, so their payloads are spelt out
-- rather than built by Json.ordered (the bytes are the same).
-- (The tail of a put's or completed's message, by queue, written once per
-- call: a batch mostly puts into, or completes in, one queue.)
local put_tails, completed_tails
per_call(function()
  put_tails, completed_tails = {}, {}
end)

local function publish_queued(tails, event, jid, queue)
  local tail = tails[queue]
  if tail == nil then
    tail = ',"event":"' .. event .. '","queue":' .. cjson.encode(queue) .. '}'
    tails[queue] = tail
  end
  publish('log', '{"jid":' .. cjson.encode(jid) .. tail)
end

function Events.put(jid, queue)
  publish_queued(put_tails, 'put', jid, queue)
end

function Events.completed(jid, queue)
  publish_queued(completed_tails, 'completed', jid, queue)
end

function Events.advanced(jid, queue, next_queue)
  Events.log({ 'jid', jid, 'to', next_queue, 'event', 'advanced', 'queue', queue })
end

function Events.failed(jid, worker, group, message)
  Events.log({
    'message', message, 'jid', jid, 'group', group, 'event', 'failed', 'worker', worker,
  })
end

-- worker is '' when the job was not running; a running job's worker also
-- hears it on its own channel.
function Events.canceled(jid, queue, worker)
  local message = Json.ordered({
    'jid', jid, 'queue', queue, 'event', 'canceled', 'worker', worker,
  })
  publish('log', message)
  if worker ~= '' then
    publish('w:' .. worker, message)
  end
end
