"""Socket addresses as stored in commitlog records and offset message ids.

A host is an address plus an int port: 4 + 4 bytes for IPv4, 16 + 4 bytes for IPv6.
Text form follows Java's ``InetSocketAddress``: ``a.b.c.d:port`` and, for IPv6, the long
form without zero compression, ``[fe80:0:0:0:1:2:3:4]:port``.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

__all__ = ["format_host", "parse_host"]


@lru_cache(maxsize=1024)
def parse_host(text: str) -> tuple[bytes, int]:
    """``"ip:port"`` or ``"[v6]:port"`` -> (4 or 16 address bytes, port). Raises ValueError."""
    if not isinstance(text, str):
        raise ValueError(f"host must be a string 'ip:port', not {text!r}")
    if text.startswith("["):
        addr_text, sep, port_text = text[1:].partition("]:")
        if not sep:
            raise ValueError(f"bad IPv6 host {text!r}: expected '[address]:port'")
    else:
        addr_text, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError(f"bad host {text!r}: expected 'ip:port'")
    try:
        addr = ipaddress.ip_address(addr_text)
    except ValueError:
        raise ValueError(f"bad host {text!r}: {addr_text!r} is not an IP address") from None
    if not port_text.isdigit() or int(port_text) > 0xFFFF:
        raise ValueError(f"bad host {text!r}: port must be 0..65535")
    return addr.packed, int(port_text)


@lru_cache(maxsize=1024)
def format_host(addr: bytes, port: int) -> str:
    """(address bytes, port) -> Java's text form."""
    if len(addr) == 4:
        return f"{addr[0]}.{addr[1]}.{addr[2]}.{addr[3]}:{port}"
    if len(addr) == 16:
        groups = ":".join(f"{int.from_bytes(addr[i : i + 2], 'big'):x}" for i in range(0, 16, 2))
        return f"[{groups}]:{port}"
    raise ValueError(f"an address has 4 or 16 bytes, not {len(addr)}")
