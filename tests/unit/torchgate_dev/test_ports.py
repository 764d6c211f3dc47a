"""The harness's ports: outside the ephemeral range, each handed out once, never a taken one."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchgate_dev import ports
from torchgate_dev.ports import (
    DEFAULT_EPHEMERAL,
    NoFreePort,
    PortPicker,
    PortRange,
    ephemeral_range,
    free_port,
    harness_pool,
    parse_port_range,
)


def kernel_ephemeral_range() -> tuple[int, int]:
    """Read here by hand, so the test does not take the module's word for it."""
    first, last = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return int(first), int(last)


def test_picked_ports_lie_outside_the_ephemeral_range_the_kernel_reports() -> None:
    first, last = kernel_ephemeral_range()
    picked = [free_port() for _ in range(100)]
    assert [port for port in picked if first <= port <= last] == []


def test_successive_picks_are_distinct() -> None:
    # Port 0 repeats itself within a few hundred picks (the kernel only knows what is bound now).
    picked = [free_port() for _ in range(1000)]
    assert len(set(picked)) == len(picked)


@contextlib.contextmanager
def held(*addresses: tuple[int, str, int, bool]) -> Iterator[None]:
    """Sockets holding ports: (family, address, port, listening)."""
    with contextlib.ExitStack() as stack:
        for family, address, port, listening in addresses:
            sock = stack.enter_context(socket.socket(family, socket.SOCK_STREAM))
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers do
            sock.bind((address, port))
            if listening:
                sock.listen()
        yield


def test_a_port_held_by_another_socket_is_never_handed_out() -> None:
    loopback, wildcard, bound_only, free = (free_port() for _ in range(4))
    picker = PortPicker([range(port, port + 1) for port in (loopback, wildcard, bound_only, free)])
    with held(
        (socket.AF_INET, "127.0.0.1", loopback, True),
        (socket.AF_INET6, "::", wildcard, True),  # dual-stack, as Go's ":port" listens
        (socket.AF_INET, "127.0.0.1", bound_only, False),
    ):
        assert picker.pick() == free
        with pytest.raises(NoFreePort):
            picker.pick()


def test_a_picker_hands_each_port_of_its_pool_out_once_then_says_so() -> None:
    first = free_port()
    picker = PortPicker([range(first, first + 1)])
    assert picker.pick() == first
    with pytest.raises(NoFreePort):
        picker.pick()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("32768\t60999\n", PortRange(32768, 60999)),
        ("1024 65535", PortRange(1024, 65535)),
        ("5000 5000", PortRange(5000, 5000)),
        ("", None),
        ("\n", None),
        ("32768", None),
        ("32768 60999 1", None),
        ("60999 32768", None),
        ("0 60999", None),
        ("32768 65536", None),
        ("-1 60999", None),
        ("32768 6e4", None),
        ("\uff13\uff12\uff17\uff16\uff18 60999", None),  # fullwidth digits: int() takes them
        ("\u00b2 60999", None),  # a superscript: str.isdigit takes it, int() does not
        ("0x8000 60999", None),
    ],
    ids=lambda value: repr(value) if isinstance(value, str) else "",
)
def test_the_range_parser_takes_only_what_the_kernel_writes(
    text: str, expected: PortRange | None
) -> None:
    assert parse_port_range(text) == expected


@given(st.text())
def test_the_range_parser_never_fails_and_gives_only_valid_ranges(text: str) -> None:
    parsed = parse_port_range(text)
    assert parsed is None or 1 <= parsed.first <= parsed.last <= 65535


@pytest.mark.parametrize(
    "content", [None, b"", b"garbage\n", b"\xff\xfe", b"60999 32768\n"], ids=str
)
def test_an_unreadable_range_file_gives_the_linux_default(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "ip_local_port_range"
    if content is not None:
        path.write_bytes(content)
    assert ephemeral_range(path) == DEFAULT_EPHEMERAL


def test_the_range_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert ephemeral_range(path) == PortRange(40000, 50000)


@pytest.mark.parametrize(
    ("ephemeral", "pool"),
    [
        (PortRange(32768, 60999), (range(20000, 30000),)),
        (PortRange(25000, 60999), (range(20000, 25000),)),
        (PortRange(20500, 29500), (range(1024, 20500), range(29501, 65536))),
        (PortRange(15000, 65535), (range(1024, 15000),)),
        (PortRange(1, 2000), (range(20000, 30000),)),
        (PortRange(1024, 65535), (ports.UNPRIVILEGED,)),
        (PortRange(1, 65535), (ports.UNPRIVILEGED,)),
    ],
    ids=[
        "linux default: the preferred window",
        "range moved down into it: what is left below",
        "range inside the window, too little left: everything outside",
        "range moved below the window: everything below",
        "range below the window: the window",
        "every unprivileged port: the bind check alone",
        "every port: the bind check alone",
    ],
)
def test_the_pool_avoids_the_ephemeral_range(ephemeral: PortRange, pool: tuple[range, ...]) -> None:
    assert harness_pool(ephemeral) == pool


@given(st.integers(1, 65535), st.integers(1, 65535))
def test_the_pool_is_never_empty_and_leaves_out_the_range_when_it_can(a: int, b: int) -> None:
    ephemeral = PortRange(min(a, b), max(a, b))
    pool = harness_pool(ephemeral)
    assert sum(map(len, pool)) > 0
    if ephemeral.first > 1024 or ephemeral.last < 65535:  # room outside it
        assert all(part.stop <= ephemeral.first or part.start > ephemeral.last for part in pool)
        assert all(part.start >= 1024 for part in pool)
