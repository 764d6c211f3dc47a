"""The harness's ports: outside the ephemeral and reserved ports, held, each handed out once."""

from __future__ import annotations

import contextlib
import random
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Iterator
from itertools import chain, pairwise
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from torchgate_dev import ports
from torchgate_dev.controlplane import processes
from torchgate_dev.ports import (
    DEFAULT_EPHEMERAL,
    NoFreePort,
    PortPicker,
    PortRange,
    ephemeral_range,
    free_port,
    harness_pool,
    hold,
    parse_port_range,
    parse_reserved_ports,
    reserved_ports,
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


def unheld_ports(count: int) -> list[int]:
    """Free ports no picker holds (``free_port``'s are held by the process's picker)."""
    scratch = PortPicker(harness_pool(ephemeral_range()))
    try:
        return [scratch.pick() for _ in range(count)]
    finally:
        scratch.close()


def test_a_port_held_by_another_socket_is_never_handed_out() -> None:
    loopback, wildcard, bound_only, other_picker, free = unheld_ports(5)
    holder = PortPicker([range(other_picker, other_picker + 1)])
    holder.pick()
    ports_ = (loopback, wildcard, bound_only, other_picker, free)
    picker = PortPicker([range(port, port + 1) for port in ports_])
    try:
        with held(
            (socket.AF_INET, "127.0.0.1", loopback, True),
            (socket.AF_INET6, "::", wildcard, True),  # dual-stack, as Go's ":port" listens
            (socket.AF_INET, "127.0.0.1", bound_only, False),
        ):
            assert picker.pick() == free
            with pytest.raises(NoFreePort):
                picker.pick()
    finally:
        picker.close()
        holder.close()


def test_a_picker_hands_each_port_of_its_pool_out_once_then_says_so() -> None:
    (first,) = unheld_ports(1)
    picker = PortPicker([range(first, first + 1)])
    try:
        assert picker.pick() == first
        with pytest.raises(NoFreePort):
            picker.pick()
    finally:
        picker.close()


class FromTheStart(random.Random):
    """Every walk starts at the pool's first port: two pickers meeting, made certain."""

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        return 0


def answers(port: int, name: str) -> bool:
    """Whether the server on ``port`` is the one serving ``name``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/{name}", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def serve(port: int, address: str, directory: Path) -> subprocess.Popen[bytes]:
    """A real server process (``http.server``: ``SO_REUSEADDR``, like Go's) on ``port``."""
    argv = [sys.executable, "-m", "http.server", str(port), "--bind", address]
    with open(directory / "log", "wb") as log:
        return subprocess.Popen(
            [*argv, "--directory", str(directory)], stdout=log, stderr=subprocess.STDOUT
        )


def wait_serving(server: subprocess.Popen[bytes], port: int, directory: Path) -> None:
    deadline = time.monotonic() + 20
    while not answers(port, directory.name):
        if server.poll() is not None:
            pytest.fail(f"the server on {port} exited: {(directory / 'log').read_text()[-300:]}")
        assert time.monotonic() < deadline, f"nothing answers on {port}"
        time.sleep(0.05)


@pytest.mark.parametrize("address", ["127.0.0.1", "::"], ids=["loopback", "dual-stack"])
def test_two_pickers_meeting_on_a_port_both_get_their_servers_up(
    tmp_path: Path, address: str
) -> None:
    # Two processes' pickers whose walks start at the same port in the same instant, before
    # either server bound it (here two pickers of one process: the kernel tells no difference).
    pool = [range(port, port + 1) for port in unheld_ports(2)]
    first, second = PortPicker(pool, rng=FromTheStart()), PortPicker(pool, rng=FromTheStart())
    with contextlib.ExitStack() as stack:
        stack.callback(first.close)
        stack.callback(second.close)
        picked = {"ours": first.pick(), "theirs": second.pick()}
        for name, port in picked.items():
            directory = tmp_path / name
            directory.mkdir()
            (directory / name).write_text(name)  # which server answers
            server = serve(port, address, directory)
            stack.callback(processes.terminate, server, grace=5)
            wait_serving(server, port, directory)


def test_a_picker_holds_its_latest_ports_and_releases_them_on_close() -> None:
    pool = [range(port, port + 1) for port in unheld_ports(3)]
    picker = PortPicker(pool, rng=FromTheStart(), held_picks=2)
    released, *kept = (picker.pick() for _ in range(3))
    try:
        assert [port for port in (released, *kept) if is_free(port)] == [released]
    finally:
        picker.close()
    assert [port for port in kept if is_free(port)] == kept


def is_free(port: int) -> bool:
    holder = hold(port)
    if holder is None:
        return False
    holder.close()
    return True


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


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\n", ()),
        ("", ()),
        ("8080\n", (PortRange(8080, 8080),)),
        ("8080,20000-20010\n", (PortRange(8080, 8080), PortRange(20000, 20010))),
        ("0,65535", (PortRange(0, 0), PortRange(65535, 65535))),
        ("0-65535", (PortRange(0, 65535),)),
        ("20005-20005", (PortRange(20005, 20005),)),
        ("8080,", ()),
        (",8080", ()),
        ("8080,,9090", ()),
        ("8080, 9090", ()),
        ("8080 9090", ()),
        ("20010-20000", ()),
        ("20000-", ()),
        ("-20000", ()),
        ("20000-20005-20010", ()),
        ("65536", ()),
        ("8080,70000", ()),
        ("0x1f90", ()),
        ("\uff18080", ()),  # a fullwidth digit: int() takes it
        ("\u00b2", ()),  # a superscript: str.isdigit takes it, int() does not
        ("32768\t60999", ()),  # the other file's format
    ],
    ids=repr,
)
def test_the_reserved_ports_parser_takes_only_what_the_kernel_writes(
    text: str, expected: tuple[PortRange, ...]
) -> None:
    assert parse_reserved_ports(text) == expected


def kernel_format(ports: Iterable[int]) -> str:
    """The reserved ports as the kernel writes them: runs as ranges, then a newline."""
    runs: list[list[int]] = []
    for port in sorted(set(ports)):
        if runs and runs[-1][1] == port - 1:
            runs[-1][1] = port
        else:
            runs.append([port, port])
    items = (f"{first}" if first == last else f"{first}-{last}" for first, last in runs)
    return ",".join(items) + "\n"


def ports_of(ranges: Iterable[PortRange]) -> set[int]:
    return set(chain.from_iterable(range(r.first, r.last + 1) for r in ranges))


@given(st.sets(st.integers(0, 65535), max_size=50))
def test_the_reserved_ports_parser_reads_back_what_the_kernel_writes(reserved: set[int]) -> None:
    assert ports_of(parse_reserved_ports(kernel_format(reserved))) == reserved


@given(st.text(alphabet=st.sampled_from("0123456789,- \n\t\u00b2x"), max_size=30) | st.text())
def test_the_reserved_ports_parser_never_fails_and_gives_only_valid_ranges(text: str) -> None:
    assert all(0 <= r.first <= r.last <= 65535 for r in parse_reserved_ports(text))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, ()),
        (b"\xff\xfe", ()),
        (b"garbage\n", ()),
        (b"\n", ()),
        (b"8080,20000-20010\n", (PortRange(8080, 8080), PortRange(20000, 20010))),
    ],
    ids=["missing", "not ascii", "garbled", "empty", "ports and a range"],
)
def test_the_reserved_ports_file_is_read_and_anything_unreadable_is_none(
    tmp_path: Path, content: bytes | None, expected: tuple[PortRange, ...]
) -> None:
    path = tmp_path / "ip_local_reserved_ports"
    if content is not None:
        path.write_bytes(content)
    assert reserved_ports(path) == expected


LINUX_DEFAULT = PortRange(32768, 60999)


@pytest.mark.parametrize(
    ("reserved", "pool"),
    [
        ((), (range(20000, 30000),)),
        ((PortRange(8080, 8080), PortRange(40000, 40100)), (range(20000, 30000),)),
        (
            (PortRange(20000, 20010), PortRange(25000, 25000), PortRange(29990, 30100)),
            (range(20011, 25000), range(25001, 29990)),
        ),
        (
            (PortRange(20100, 20200), PortRange(20150, 20300)),
            (range(20000, 20100), range(20301, 30000)),
        ),
        (
            (PortRange(20500, 29800),),
            (range(1024, 20500), range(29801, 32768), range(61000, 65536)),
        ),
        ((PortRange(0, 32767), PortRange(61000, 65535)), (range(32768, 61000),)),
        ((PortRange(0, 65535),), (ports.UNPRIVILEGED,)),
    ],
    ids=[
        "nothing reserved: the preferred window",
        "reserved elsewhere: the preferred window",
        "reserved inside the window: left out",
        "overlapping reservations: left out once",
        "too little left in the window: everything unreserved outside the range",
        "everything outside the range reserved: the range, with the bind check alone",
        "everything reserved: the bind check alone",
    ],
)
def test_the_pool_leaves_out_the_reserved_ports(
    reserved: tuple[PortRange, ...], pool: tuple[range, ...]
) -> None:
    assert harness_pool(LINUX_DEFAULT, reserved=reserved) == pool


port_ranges = st.tuples(st.integers(0, 65535), st.integers(0, 65535)).map(
    lambda ends: PortRange(min(ends), max(ends))
)


@given(st.integers(1, 65535), st.integers(1, 65535), st.lists(port_ranges, max_size=8))
def test_the_pool_is_the_first_non_empty_choice_of_rule_3(
    a: int, b: int, reserved: list[PortRange]
) -> None:
    ephemeral = PortRange(min(a, b), max(a, b))
    pool = harness_pool(ephemeral, reserved=reserved)
    taken, unprivileged = ports_of(reserved), set(ports.UNPRIVILEGED)
    avoided = ports_of([ephemeral]) | taken
    preferred = set(ports.PREFERRED_POOL) - avoided
    if len(preferred) >= ports.MINIMUM_POOL:
        expected = preferred
    else:
        expected = (unprivileged - avoided) or (unprivileged - taken) or unprivileged
    assert set(chain.from_iterable(pool)) == expected
    assert all(part for part in pool)
    assert all(left.stop < right.start for left, right in pairwise(pool))


def picks_with_reserved_ports(tmp_path: Path, listed: str, count: int) -> list[int]:
    """``free_port`` picks of a fresh process that sees ``listed`` as the reserved ports.

    The file is bind-mounted over the kernel's in a mount namespace of the child's own, so the
    machine's reservations stay as they are.
    """
    if shutil.which("unshare") is None:
        pytest.skip("no unshare")
    fake = tmp_path / "ip_local_reserved_ports"
    fake.write_text(listed)
    pick = (
        f"from torchgate_dev.ports import free_port; print(*(free_port() for _ in range({count})))"
    )
    mount = f"mount --bind {fake} {ports.RESERVED_PORTS_FILE}"
    child = subprocess.run(
        ["unshare", "--mount", "sh", "-c", f'{mount} && exec "$0" -c "$1"', sys.executable, pick],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if child.returncode != 0 and "Traceback" not in child.stderr:
        pytest.skip(f"no mount namespace here: {child.stderr.strip()}")
    assert child.returncode == 0, child.stderr
    return [int(port) for port in child.stdout.split()]


def test_free_port_leaves_out_the_ports_the_kernel_lists_as_reserved(tmp_path: Path) -> None:
    picked = picks_with_reserved_ports(tmp_path, "8080,20000-24999\n", 300)
    assert len(picked) == 300
    assert [port for port in picked if not 25000 <= port <= 29999] == []
