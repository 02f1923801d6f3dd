"""Where a process listens, and the address it tells others: bound and advertised apart.

A process on one machine binds and advertises the same address. Across machines they differ: a node
in a container or behind NAT binds 0.0.0.0 (every interface) but must tell the ring an address other
machines reach, and a node id is the hash of that advertised endpoint (SIGCOMM'01 §4.2: "hashing
the node's IP address"), so the same node keeps its id wherever it binds.

`resolve` is pure; `outward_address` reads this machine's interfaces (Linux: the interface of the
default route, else the first one up that is not loopback), sending nothing.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WILDCARD = {"0.0.0.0", "*", ""}
SIOCGIFADDR = 0x8915


@dataclass(frozen=True)
class Listen:
    """Bind on `bind`; others reach this process at `host` (and at `port` for its main socket, when
    given: a port mapped by NAT or a container)."""

    bind: str
    host: str
    port: int | None = None


def parse_advertise(text: str) -> tuple[str, int | None]:
    """HOST or HOST:PORT; the host may not be a wildcard (nobody can reach "0.0.0.0")."""
    host, _, port = text.rpartition(":") if ":" in text else (text, "", "")
    bad = ValueError(f"--advertise must be HOST or HOST:PORT (port 1..65535) that other machines reach, got {text!r}")
    if not host or host in WILDCARD or any(c.isspace() for c in host):
        raise bad
    if not port:
        return host, None
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise bad
    return host, int(port)


def resolve(host: str, bind: str | None = None, advertise: str | None = None,
            outward: Callable[[], str] | None = None) -> Listen:
    """The addresses of a process given --host, --bind and --advertise.

    --host alone binds and advertises it (a wildcard host binds every interface and advertises this
    machine's outward address); --bind ADDR binds there instead, advertising ADDR unless it is a
    wildcard; --advertise HOST[:PORT] says what to advertise whatever is bound."""
    where = bind if bind is not None else host
    where = "0.0.0.0" if where in WILDCARD else where
    if advertise is not None:
        adv_host, adv_port = parse_advertise(advertise)
        return Listen(where, adv_host, adv_port)
    if where == "0.0.0.0":
        return Listen(where, (outward or outward_address)())
    return Listen(where, where)


def outward_address() -> str:
    """This machine's address on the interface of its default route, else on the first interface up
    that is not loopback, else 127.0.0.1."""
    names = [name for _, name in socket.if_nameindex() if name != "lo"]
    default = _default_route_interface()
    for name in ([default] if default in names else []) + names:
        address = _ipv4_of(name)
        if address is not None and not address.startswith("127."):
            return address
    return "127.0.0.1"


def _default_route_interface() -> str | None:
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if len(fields) > 1 and fields[1] == "00000000":
            return fields[0]
    return None


def _ipv4_of(interface: str) -> str | None:
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", interface.encode()[:15]))
        except OSError:  # no IPv4 address on it
            return None
    return socket.inet_ntoa(packed[20:24])
