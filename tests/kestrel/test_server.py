"""`lanner serve` driven over real sockets by a stock memcache client and raw requests,
on SQLite and Redis: Kestrel's set/get, reliable fetch, blocking fetch, stats and errors."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from pymemcache.exceptions import MemcacheServerError

from lanner import Capability

from .conftest import Running, reply, until


def test_set_then_get_gives_items_in_order_then_nothing(server: Running) -> None:
    client = server.client()
    for value in (b"one", b"two", b"three"):
        assert client.set("work", value) is True
    assert [client.get("work") for _ in range(4)] == [b"one", b"two", b"three", None]


def test_binary_and_empty_values_come_back_byte_for_byte(server: Running) -> None:
    client = server.client()
    values = [bytes(range(256)), b"", "zoë ☃".encode(), b"\r\nEND\r\n", b'{"base64": "x"}']
    for value in values:
        client.set("bin", value)
    assert [client.get("bin") for _ in values] == values


def test_an_item_put_by_python_is_read_over_memcache(server: Running) -> None:
    server.engine.put("work", "py-1", "Task", '"from python"')
    server.engine.put("work", "py-2", "Task", '{"args": [1]}')
    client = server.client()
    assert client.get("work") == b"from python"
    assert client.get("work") == b'{"args": [1]}'


def test_a_plain_get_removes_the_item(server: Running) -> None:
    client = server.client()
    client.set("work", b"x")
    assert client.get("work") == b"x"
    until(lambda: server.engine.length("work") == 0)


def test_open_holds_the_item_until_close(server: Running) -> None:
    reader, other = server.client(), server.client()
    reader.set("work", b"x")

    assert reader.get("work/open") == b"x"
    assert other.get("work") is None
    assert server.stat("work", "open_transactions") == 1
    assert reader.get("work/close") is None

    until(lambda: server.engine.length("work") == 0)
    assert other.get("work") is None


def test_abort_gives_the_item_back_to_the_head_of_the_queue(server: Running) -> None:
    reader, other = server.client(), server.client()
    reader.set("work", b"first")
    reader.set("work", b"second")
    assert reader.get("work/open") == b"first"
    assert reader.get("work/abort") is None
    assert other.get("work") == b"first"
    assert other.get("work") == b"second"


def test_close_open_walks_the_queue_one_round_trip_per_item(server: Running) -> None:
    client = server.client()
    values = [f"item-{n}".encode() for n in range(5)]
    for value in values:
        client.set("work", value)

    seen = [client.get("work/open")]
    seen += [client.get("work/close/open") for _ in range(4)]
    assert seen == values
    assert client.get("work/close/open") is None
    assert client.get("work/close") is None
    until(lambda: server.engine.length("work") == 0)


def test_a_client_that_disconnects_gives_back_what_it_held_open(server: Running) -> None:
    reader = server.client()
    reader.set("work", b"precious")
    assert reader.get("work/open") == b"precious"
    reader.close()

    other = server.client()
    assert other.get("work/t=5000") == b"precious"


def test_confirm_closes_open_reads(server: Running) -> None:
    sock = server.raw()
    sock.sendall(b"set work 0 0 1\r\na\r\nget work/open\r\n")
    assert reply(sock) == b"STORED\r\nVALUE work/open 0 1\r\na\r\nEND\r\n"
    sock.sendall(b"confirm work 1\r\n")
    assert reply(sock) == b"END\r\n"
    sock.sendall(b"confirm work 1\r\n")  # nothing is open: a known command, misused
    assert reply(sock, b"\r\n") == b"CLIENT_ERROR no item of 'work' is held open\r\n"
    sock.sendall(b"version\r\n")  # the connection goes on
    assert reply(sock, b"\r\n").startswith(b"VERSION ")
    until(lambda: server.engine.length("work") == 0)


def test_a_blocked_get_returns_as_soon_as_an_item_arrives(server: Running) -> None:
    got: list[bytes | None] = []
    reader = server.client()
    thread = threading.Thread(target=lambda: got.append(reader.get("work/t=8000")))
    thread.start()
    until(lambda: server.stat("work", "waiters") == 1)
    started = time.monotonic()
    server.client().set("work", b"now")
    thread.join(timeout=10)
    assert got == [b"now"]
    assert time.monotonic() - started < 4  # well before its 8 s deadline


def test_a_blocked_get_with_nothing_coming_ends_empty(server: Running) -> None:
    started = time.monotonic()
    assert server.client().get("work/t=200") is None
    assert time.monotonic() - started >= 0.2


def test_the_second_blocked_reader_gets_the_item_when_the_first_disconnects(
    server: Running,
) -> None:
    first, second = server.raw(), server.raw()
    first.sendall(b"get work/t=8000\r\n")
    until(lambda: server.stat("work", "waiters") == 1)
    second.sendall(b"get work/t=8000\r\n")
    until(lambda: server.stat("work", "waiters") == 2)
    first.close()
    until(lambda: server.stat("work", "waiters") == 1)

    server.client().set("work", b"handed")
    assert reply(second) == b"VALUE work/t=8000 0 6\r\nhanded\r\nEND\r\n"


def test_a_long_poll_cancelled_by_disconnect_loses_nothing(server: Running) -> None:
    writer, reader = server.client(), server.client()
    for n in range(20):
        waiting = server.raw()
        waiting.sendall(b"get work%d/t=8000\r\n" % n)
        until(lambda n=n: server.stat(f"work{n}", "waiters") == 1)  # type: ignore[misc]
        waiting.close()  # and at once an item comes: it must not go to the gone reader
        writer.set(f"work{n}", b"item")
    assert [reader.get(f"work{n}/t=5000") for n in range(20)] == [b"item"] * 20


def test_an_open_blocked_get_abandoned_mid_handover_goes_to_the_next(server: Running) -> None:
    writer, reader = server.client(), server.client()
    for n in range(10):
        waiting = server.raw()
        waiting.sendall(b"get work%d/t=8000/open\r\n" % n)
        until(lambda n=n: server.stat(f"work{n}", "waiters") == 1)  # type: ignore[misc]
        writer.set(f"work{n}", b"item")  # handed to the reader, or on its way, as it leaves
        waiting.close()
    assert [reader.get(f"work{n}/t=5000") for n in range(10)] == [b"item"] * 10


def test_peek_shows_the_head_without_taking_it(server: Running) -> None:
    client = server.client()
    assert client.get("work/peek") is None
    client.set("work", b"a")
    client.set("work", b"b")
    assert client.get("work/peek") == b"a"
    assert client.get("work/peek") == b"a"
    assert client.get("work") == b"a"


def test_stats_show_kestrels_keys_per_queue(server: Running) -> None:
    client = server.client()
    client.set("work", b"abc")
    client.set("work", b"de")
    assert client.get("work/open") == b"abc"
    stats = {k.decode(): v for k, v in client.stats().items()}

    for key in ("items", "bytes", "total_items", "open_transactions", "age", "expired_items",
                "discarded", "waiters"):  # fmt: skip
        assert f"queue_work_{key}" in stats
    assert stats["queue_work_items"] == 1  # the open item has left the queue, as in Kestrel
    assert stats["queue_work_open_transactions"] == 1
    assert stats["cmd_set"] == 2
    assert stats["get_hits"] == 1
    if Capability.LIMITS in server.engine.capabilities:
        assert stats["queue_work_total_items"] == 2
        assert stats["queue_work_bytes"] == len('"abc"') + len('"de"')


def test_an_open_item_leaves_items_for_open_transactions_until_given_back(
    server: Running,
) -> None:
    reader = server.client()
    for value in (b"one", b"two"):
        reader.set("work", value)

    def counts() -> tuple[int, int]:
        return server.stat("work", "items"), server.stat("work", "open_transactions")

    assert counts() == (2, 0)
    assert reader.get("work/open") == b"one"
    assert counts() == (1, 1)
    assert reader.get("work/abort") is None
    until(lambda: counts() == (2, 0))
    assert reader.get("work/open") == b"one"
    assert reader.get("work/close") is None
    until(lambda: counts() == (1, 0))


def test_unknown_and_malformed_requests_get_memcache_errors(server: Running) -> None:
    sock = server.raw()
    sock.sendall(b"frobnicate work\r\n")
    assert reply(sock, b"\r\n") == b"ERROR\r\n"
    sock.sendall(b"set bad.name 0 0 1\r\nx\r\n")
    assert reply(sock, b"\r\n").startswith(b"CLIENT_ERROR invalid queue name 'bad.name'")
    sock.sendall(b"version\r\n")  # the connection goes on
    assert reply(sock, b"\r\n").startswith(b"VERSION ")
    sock.sendall(b"get work/peek/open\r\n")
    assert reply(sock, b"\r\n").startswith(b"CLIENT_ERROR")
    assert sock.recv(100) == b""  # Kestrel closes after a bad combination of options


def test_a_plain_get_while_holding_an_open_item_is_an_error(server: Running) -> None:
    sock = server.raw()
    sock.sendall(b"set work 0 0 1\r\na\r\nget work/open\r\n")
    reply(sock)
    sock.sendall(b"get work\r\n")
    assert reply(sock, b"\r\n") == (
        b"CLIENT_ERROR an item of 'work' is held open: close or abort it first\r\n"
    )
    assert sock.recv(100) == b""
    assert server.client().get("work/t=5000") == b"a"  # given back on the disconnect


def test_opening_more_than_the_most_open_items_is_an_error(server: Running) -> None:
    sock = server.raw()
    sock.sendall(b"set work 0 0 1\r\na\r\nset work 0 0 1\r\nb\r\nget work/open\r\n")
    reply(sock)
    sock.sendall(b"get work/open\r\n")  # --max-open-transactions is 1
    assert reply(sock, b"\r\n") == (
        b"CLIENT_ERROR 'work' has 1 open already, the most allowed "
        b"(--max-open-transactions): close or abort first\r\n"
    )
    assert sock.recv(100) == b""
    reader = server.client()
    assert [reader.get("work/t=5000"), reader.get("work/t=5000")] == [b"a", b"b"]


def test_an_oversized_item_is_refused_and_the_connection_goes_on(server: Running) -> None:
    sock = server.raw()
    size = server.server.max_item_bytes + 1
    sock.sendall(b"set work 0 0 %d\r\n" % size + b"x" * size + b"\r\nget work\r\n")
    assert reply(sock) == b"SERVER_ERROR object too large for this engine\r\nEND\r\n"


def test_pipelined_requests_are_answered_in_order(server: Running) -> None:
    sock = server.raw()
    sock.sendall(b"".join(b"set work 0 0 2\r\n%02d\r\n" % n for n in range(100)))
    assert reply(sock, b"STORED\r\n" * 100) == b"STORED\r\n" * 100
    sock.sendall(b"get work\r\n" * 3)
    expected = b"".join(b"VALUE work 0 2\r\n%02d\r\nEND\r\n" % n for n in range(3))
    assert reply(sock, expected) == expected


def test_noreply_sets_store_without_a_reply(server: Running) -> None:
    sock = server.raw()
    sock.sendall(b"set work 0 0 1 noreply\r\na\r\nget work\r\n")
    assert reply(sock) == b"VALUE work 0 1\r\na\r\nEND\r\n"


def test_delete_flush_and_flush_all(server: Running) -> None:
    client = server.client()
    for queue in ("a", "b", "c"):
        client.set(queue, b"x")
        client.set(queue, b"y")
    assert client.delete("a") is True
    assert client.get("a") is None
    sock = server.raw()
    sock.sendall(b"flush b\r\n")
    assert reply(sock) == b"END\r\n"
    assert client.get("b") is None
    assert client.get("c") == b"x"
    client.flush_all()
    assert client.get("c") is None


def test_version(server: Running) -> None:
    assert server.client().version() == lanner_version().encode()


def lanner_version() -> str:
    import lanner

    return lanner.__version__


def test_an_item_past_its_expiry_is_not_given(server: Running) -> None:
    server.require(Capability.LIMITS)
    client = server.client()
    client.set("work", b"stale", expire=int(time.time()) - 60)  # a Unix time in the past
    client.set("work", b"fresh", expire=3600)  # seconds from now
    assert client.get("work") == b"fresh"
    assert client.get("work") is None
    assert server.stat("work", "expired_items") == 1


def test_a_full_queue_refuses_with_server_error(server: Running) -> None:
    server.require(Capability.LIMITS)
    server.engine.config_set("work-max-items", 2)
    client = server.client()
    client.set("work", b"1")
    client.set("work", b"2")
    with pytest.raises(MemcacheServerError, match="full"):
        client.set("work", b"3")
    assert [client.get("work") for _ in range(3)] == [b"1", b"2", None]


def test_a_full_queue_that_discards_old_items_keeps_the_newest(server: Running) -> None:
    server.require(Capability.LIMITS)
    server.engine.config_set("work-max-items", 2)
    server.engine.config_set("work-discard-old-when-full", 1)
    client = server.client()
    for value in (b"1", b"2", b"3"):
        client.set("work", value)
    assert [client.get("work") for _ in range(3)] == [b"2", b"3", None]
    assert server.stat("work", "discarded") == 1


def test_fanout_children_read_once_get_every_later_item(server: Running) -> None:
    server.require(Capability.FANOUT)
    client = server.client()
    assert client.get("feed+audit") is None  # now a child of feed
    client.set("feed", b"event")
    assert client.get("feed+audit") == b"event"
    assert client.get("feed+mail") is None
    assert client.get("feed") == b"event"


def test_shutdown_gives_back_open_items(server: Running) -> None:
    client = server.client()
    client.set("work", b"held")
    assert client.get("work/open") == b"held"
    sock = server.raw()
    sock.sendall(b"shutdown\r\n")
    assert sock.recv(100) == b""
    until(lambda: server.engine.queue_counts("work").waiting == 1)
    with pytest.raises(OSError):
        socket.create_connection(server.address, timeout=2).recv(1)


def test_an_open_item_stays_held_past_its_lease(server: Running) -> None:
    server.engine.config_set("work-heartbeat", 1)
    server.engine.config_set("grace-period", 0)
    reader, other = server.client(), server.client()
    reader.set("work", b"long job")
    assert reader.get("work/open") == b"long job"
    assert other.get("work/t=2500") is None  # its 1 s lock was renewed, twice or more
    assert reader.get("work/close") is None
    until(lambda: server.engine.length("work") == 0)
