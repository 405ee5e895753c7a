"""`lanner serve`: a Kestrel-compatible memcache server in front of any lanner engine.

One asyncio `Connection` per client parses its requests (`lanner.kestrel.protocol`) and
answers them in order; the engine work goes through the shared `Front`. A connection that
closes, for any reason, gives back the items it held open: they go to the next reader at
once. The protocol has no authentication: the server binds to 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Coroutine
from typing import Any, Final, cast

from lanner._version import __version__
from lanner.engine import Capability, Engine
from lanner.errors import ConfigError, LannerError
from lanner.kestrel import protocol
from lanner.kestrel.front import Front, logger
from lanner.kestrel.items import from_data
from lanner.kestrel.processes import DEFAULT_MAX_CONNECTIONS
from lanner.kestrel.protocol import Command, Get, ProtocolError, QueueCommand, Set, Simple
from lanner.limits import MAX_CONNECTIONS, MAX_OPEN_TRANSACTIONS
from lanner.records import QueueCounts

DEFAULT_PORT: Final = 22133
"""Kestrel's memcache port."""

PAUSE_READING_AT: Final = 256
"""Requests parsed but not yet answered at which a connection stops reading (flow control)."""

END: Final = b"END\r\n"
TOO_MANY_CONNECTIONS: Final = b"SERVER_ERROR too many open connections\r\n"

Request = tuple[Command, bytes] | ProtocolError


class KestrelServer:
    """Serve `engine` over Kestrel's memcache protocol on `host`:`port` (0: any free port)."""

    def __init__(
        self,
        engine: Engine,
        host: str = "127.0.0.1",
        port: int = DEFAULT_PORT,
        *,
        max_open_transactions: int = 1,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        reuse_port: bool = False,
        worker: str | None = None,
    ) -> None:
        if (
            isinstance(max_open_transactions, bool)
            or not isinstance(max_open_transactions, int)
            or not 1 <= max_open_transactions <= MAX_OPEN_TRANSACTIONS
        ):
            raise ConfigError(
                f"max_open_transactions must be an int from 1 to {MAX_OPEN_TRANSACTIONS}, "
                f"not {max_open_transactions!r}"
            )
        if (
            isinstance(max_connections, bool)
            or not isinstance(max_connections, int)
            or not 1 <= max_connections <= MAX_CONNECTIONS
        ):
            raise ConfigError(
                f"max_connections must be an int from 1 to {MAX_CONNECTIONS}, "
                f"not {max_connections!r}"
            )
        self.engine = engine
        self.host = host
        self.port = port
        self.max_open_transactions = max_open_transactions
        self.max_connections = max_connections
        self.reuse_port = reuse_port
        self.max_item_bytes = engine.max_data_bytes
        self.front = Front(engine, worker or f"kestrel@{socket.gethostname()}:{os.getpid()}")
        self.connections: set[Connection] = set()
        self.counters = dict.fromkeys(
            ("total_connections", "cmd_get", "cmd_set", "cmd_peek", "get_hits", "get_misses"), 0
        )
        self.started = time.time()
        self._server: asyncio.Server | None = None
        self._chores: set[asyncio.Task[None]] = set()
        self._heartbeats: asyncio.Task[None] | None = None
        self._stopping = False
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        # A listen queue as long as the connections taken: a thousand clients connecting at
        # once would overflow asyncio's default (100), and a dropped SYN is retried 1 s later.
        self._server = await loop.create_server(
            lambda: Connection(self),
            self.host,
            self.port,
            reuse_address=True,
            reuse_port=self.reuse_port or None,
            backlog=self.max_connections,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._heartbeats = asyncio.get_running_loop().create_task(self.front.heartbeat_open())

    async def serve_until_stopped(self) -> None:
        await self._stopped.wait()
        await asyncio.gather(*self._chores, return_exceptions=True)

    async def stop(self) -> None:
        """Stop listening, close every connection and give back the items they held open."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        if self._server is not None:
            self._server.close()
        for connection in list(self.connections):
            connection.transport.close()
        while self.connections:  # connection_lost gives each one's open items back
            await asyncio.sleep(0.001)
        chores = [task for task in self._chores if task is not asyncio.current_task()]
        if self._heartbeats is not None:
            self._heartbeats.cancel()
            chores.append(self._heartbeats)
        await asyncio.gather(*chores, return_exceptions=True)
        await self.front.close()
        self._stopped.set()

    def background(self, coroutine: Coroutine[object, object, None]) -> None:
        """Run a coroutine beside the connections; stop() waits for it."""
        task = asyncio.get_running_loop().create_task(coroutine)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    # -- commands that are not about one connection ----------------------------------------
    async def stats(self) -> list[tuple[str, object]]:
        now = time.time()
        counts = await self.front.call(self.engine.queues)
        shown: list[tuple[str, object]] = [
            ("pid", os.getpid()),  # memcached's: which process of `--processes N` answered
            ("uptime", int(now - self.started)),
            ("time", int(now)),
            ("version", __version__),
            ("curr_connections", len(self.connections)),
            *self.counters.items(),
        ]
        limits = Capability.LIMITS in self.engine.capabilities
        known = {queue.name: queue for queue in counts}
        for name in sorted(known.keys() | self.front.queues_read()):
            queue = known.get(name) or QueueCounts(name, 0, 0, 0, 0, 0, 0, False)
            # Kestrel's count: an item handed out (running, locked by a reader) has left the
            # queue and is an open transaction; a stalled one (its lock ran out) is back in it.
            held = queue.waiting + queue.scheduled + queue.stalled
            usage = await self.front.call(self.engine.queue_usage, name) if limits else None
            last, read_at = self.front.last_read(name)
            shown += [
                (f"queue_{name}_items", held),
                (f"queue_{name}_bytes", usage.bytes if usage else 0),
                (f"queue_{name}_total_items", usage.total_items if usage else 0),
                (f"queue_{name}_expired_items", usage.expired if usage else 0),
                (f"queue_{name}_discarded", usage.discarded if usage else 0),
                (f"queue_{name}_age", _age_ms(last, read_at)),
                (f"queue_{name}_waiters", self.front.waiters(name)),
                (f"queue_{name}_open_transactions", queue.running),
            ]
        return shown

    async def flush(self, queue: str) -> int:
        return await self.front.call(_flush, self.engine, queue)


def _flush(engine: Engine, queue: str) -> int:
    """Drop every item of `queue` that is not open (waiting or scheduled)."""
    dropped = 0
    for state in ("waiting", "scheduled"):
        while jids := engine.jobs(state, queue, 0, 500):
            dropped += len(engine.cancel(jids))
    return dropped


def _age_ms(job: object, read_at: float) -> int:
    """Kestrel's `age`: how long the last item read had been in its queue, in ms."""
    history = getattr(job, "history", ())
    put_at = next((event.when for event in history if event.what == "put"), None)
    return 0 if put_at is None else max(0, int((read_at - put_at) * 1000))


class Connection(asyncio.Protocol):
    """One client: its requests in order, and the items it holds open, by queue."""

    transport: asyncio.Transport

    def __init__(self, server: KestrelServer) -> None:
        self.server = server
        self.front = server.front
        self.buffer = bytearray()
        self.requests: deque[Request] = deque()
        self.arrived: asyncio.Future[None] | None = None  # set while serve() waits for requests
        self.writable = asyncio.Event()
        self.writable.set()
        self.pending_set: Set | None = None  # a set whose data block is still arriving
        self.skipping = 0  # bytes of an oversized data block still to drop
        self.parsing = True  # False after a request that closes the connection
        self.reading_paused = False
        self.closed = False
        self.open: dict[str, list[str]] = {}  # queue -> jids this client holds open
        self.task: asyncio.Task[None] | None = None

    # -- asyncio callbacks ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)
        if len(self.server.connections) >= self.server.max_connections:
            self.parsing = False
            self.transport.write(TOO_MANY_CONNECTIONS)
            self.transport.close()
            return
        self.server.connections.add(self)
        self.server.counters["total_connections"] += 1
        self.task = asyncio.get_running_loop().create_task(self.serve())

    def data_received(self, data: bytes) -> None:
        if not self.parsing:
            return
        self.buffer += data
        self.parse()
        if self.arrived is not None and not self.arrived.done():
            self.arrived.set_result(None)
        if len(self.requests) >= PAUSE_READING_AT and not self.reading_paused:
            self.reading_paused = True
            self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        if self.task is not None:
            self.task.cancel()
        for queue, jids in self.open.items():  # Kestrel's auto-abort
            self.server.background(self.front.release(queue, jids))
        self.open.clear()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # -- reading requests -----------------------------------------------------------------
    def parse(self) -> None:
        buffer = self.buffer
        while self.parsing and self._data_block_done():
            end = buffer.find(b"\n")
            if end < 0:
                if len(buffer) > protocol.MAX_LINE:
                    self._refuse(protocol.client_error("line too long", close=True))
                return
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[: end + 1]
            try:
                commands = protocol.parse(line)
            except ProtocolError as error:
                self._refuse(error)
                continue
            for command in commands:
                if not isinstance(command, Set):
                    self.requests.append((command, b""))
                elif command.size > self.server.max_item_bytes:
                    self.skipping = command.size + 2
                    self.requests.append(
                        ProtocolError(b"SERVER_ERROR object too large for this engine\r\n")
                    )
                else:
                    self.pending_set = command

    def _data_block_done(self) -> bool:
        """Take in what arrived of an oversized block to drop or a set's data block; False
        while more of it is to come."""
        buffer = self.buffer
        if self.skipping:
            dropped = min(self.skipping, len(buffer))
            del buffer[:dropped]
            self.skipping -= dropped
            return not self.skipping
        if self.pending_set is not None:
            size = self.pending_set.size
            if len(buffer) < size + 2:
                return False
            if buffer[size : size + 2] != b"\r\n":
                self._refuse(protocol.client_error("bad data chunk", close=True))
                return False
            self.requests.append((self.pending_set, bytes(buffer[:size])))
            del buffer[: size + 2]
            self.pending_set = None
        return True

    def _refuse(self, error: ProtocolError) -> None:
        self.requests.append(error)
        self.skipping = error.skip
        if error.close:
            self.parsing = False
            self.buffer.clear()

    # -- answering ------------------------------------------------------------------------
    async def serve(self) -> None:
        try:
            while True:
                while not self.requests:
                    if self.reading_paused:
                        self.reading_paused = False
                        self.transport.resume_reading()
                    self.arrived = asyncio.get_running_loop().create_future()
                    await self.arrived
                request = self.requests.popleft()
                if isinstance(request, ProtocolError):
                    self.transport.write(request.reply)
                    if request.close:
                        self.transport.close()
                        return
                    continue
                command, data = request
                reply = await self.answer(command, data)
                if reply:
                    self.transport.write(reply)
                if not self.writable.is_set():
                    await self.writable.wait()
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug must cost one connection, never the server
            logger.exception("kestrel connection failed")
            self.transport.close()

    async def answer(self, command: Command, data: bytes) -> bytes | None:
        try:
            if isinstance(command, Get):
                return await self.get(command)
            if isinstance(command, Set):
                return await self.set(command, data)
            if isinstance(command, QueueCommand):
                return await self.queue_command(command)
            return await self.simple(command)
        except ProtocolError as error:
            if error.close:
                self.transport.write(error.reply)
                self.transport.close()
                return None
            return error.reply
        except LannerError as error:
            reply = f"SERVER_ERROR {' '.join(str(error).split())}\r\n"
            return None if getattr(command, "noreply", False) else reply.encode()

    async def set(self, command: Set, data: bytes) -> bytes | None:
        self.server.counters["cmd_set"] += 1
        await self.front.put(command.queue, data, command.expiry)
        return None if command.noreply else b"STORED\r\n"

    async def get(self, command: Get) -> bytes | None:
        counters, queue = self.server.counters, command.queue
        if command.peek:
            counters["cmd_peek"] += 1
            jobs = await self.front.call(self.server.engine.peek, queue)
            return protocol.value_reply(command.key, from_data(jobs[0].data)) if jobs else END
        counters["cmd_get"] += 1
        held = self.open.get(queue, [])
        if command.abort:
            await self.front.release(queue, self.open.pop(queue, []))
            return END
        if command.close:
            await self._close_open(queue, len(held))
            if not command.open:
                return END
        elif held and not command.open:
            raise protocol.client_error(
                f"an item of {queue!r} is held open: close or abort it first", close=True
            )
        opened = len(self.open.get(queue, ()))
        if command.open and opened >= self.server.max_open_transactions:
            raise protocol.client_error(
                f"{queue!r} has {opened} open already, the most allowed "
                "(--max-open-transactions): close or abort first",
                close=True,
            )
        job = await self.front.take(queue, command.timeout)
        if job is None:
            counters["get_misses"] += 1
            return END
        if self.closed or self.transport.is_closing():  # its reader is gone: the next one
            await self.front.release(queue, [job.jid])
            return None
        counters["get_hits"] += 1
        reply = protocol.value_reply(command.key, from_data(job.data))
        if command.open:
            self.open.setdefault(queue, []).append(job.jid)
            self.front.hold(job)
            return reply
        self.transport.write(reply)
        self.front.complete_soon(queue, job.jid)
        return None

    async def _close_open(self, queue: str, count: int) -> int:
        """Confirm the `count` oldest items this client holds open in `queue`."""
        held = self.open.get(queue, [])
        closing, rest = held[:count], held[count:]
        if rest:
            self.open[queue] = rest
        else:
            self.open.pop(queue, None)
        await asyncio.gather(*(self.front.complete(queue, jid) for jid in closing))
        return len(closing)

    async def queue_command(self, command: QueueCommand) -> bytes | None:
        engine, queue = self.server.engine, command.queue
        if command.name == "confirm":
            confirmed = await self._close_open(queue, command.count)
            refused = protocol.client_error(f"no item of {queue!r} is held open")
            reply = END if confirmed else refused.reply
        elif command.name == "flush":
            await self.server.flush(queue)
            reply = END
        else:  # delete
            await self.server.flush(queue)
            await self.front.call(engine.queue_forget, [queue])
            reply = b"DELETED\r\n"
        return None if command.noreply else reply

    async def simple(self, command: Simple) -> bytes | None:
        if command.name == "version":
            return f"VERSION {__version__}\r\n".encode()
        if command.name == "stats":
            return protocol.stats_reply(await self.server.stats())
        if command.name == "flush_all":
            for queue in await self.front.call(self.server.engine.queues):
                await self.server.flush(queue.name)
            return None if command.noreply else b"OK\r\n"
        if command.name == "shutdown":
            self.server.background(self.server.stop())
            return None
        self.transport.close()  # quit
        return None


async def serve(
    engine: Engine,
    host: str = "127.0.0.1",
    port: int = DEFAULT_PORT,
    *,
    max_open_transactions: int = 1,
    ready: asyncio.Event | None = None,
) -> None:
    """Run a server until a client sends `shutdown` (or the task is cancelled)."""
    server = KestrelServer(engine, host, port, max_open_transactions=max_open_transactions)
    await server.start()
    if ready is not None:
        ready.set()
    try:
        await server.serve_until_stopped()
    finally:
        with contextlib.suppress(Exception):
            await server.stop()


class ServerThread:
    """A `KestrelServer` on an event loop of its own thread: to embed one in a program or a
    test. `with ServerThread(engine) as server:` serves on `server.port` until the end."""

    def __init__(
        self, engine: Engine, host: str = "127.0.0.1", port: int = 0, **options: Any
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self.server = KestrelServer(engine, host, port, **options)
        self._loop.run_until_complete(self.server.start())
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="lanner-kestrel", daemon=True
        )
        self._thread.start()

    @property
    def port(self) -> int:
        return self.server.port

    def stop(self) -> None:
        """Stop serving (open items are given back) and end the thread."""
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self.server.stop(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def __enter__(self) -> ServerThread:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
