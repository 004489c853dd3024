"""No pulls from link-local addresses (and AWS's IPv6 metadata address) unless allowed.

Checked on the address each connection is about to use (after DNS and every redirect); docs/security.md."""

from __future__ import annotations

import errno
import ipaddress
import socket
import ssl

import aiohttp

#: A source whose host is a literal link-local address, as the CRD's CEL rule matches it.
LINK_LOCAL_SOURCE_PATTERN = r"^(https://)?(169\.254\.|\[([fF][eE][89aAbB][0-9a-fA-F]:|::[fF]{4}:169\.254\.))"
#: Cloud metadata services outside the link-local ranges (AWS's over IPv6).
METADATA_ADDRESSES = frozenset({ipaddress.ip_address("fd00:ec2::254")})
#: The option that allows them.
ALLOW_OPTION = "--bitstream-allow-link-local"


def is_link_local(address: str) -> bool:
    """Whether ``address`` (an IP address, IPv6 with or without brackets or a zone) is link-local."""
    text = address.strip("[]").split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_link_local or ip in METADATA_ADDRESSES


def refusing_socket(addr_info: tuple[int, int, int, str, tuple[object, ...]]) -> socket.socket:
    """A socket for ``addr_info`` (aiohttp's socket factory), unless its address is link-local: OSError then."""
    family, type_, proto, _canonname, address = addr_info
    host = str(address[0])
    if is_link_local(host):
        raise OSError(
            errno.EPERM,
            f"{host} is a link-local address (a cloud metadata service or the node's own link); "
            f"bitstream sources there are refused unless {ALLOW_OPTION} is set",
        )
    return socket.socket(family=family, type=type_, proto=proto)


def pull_connector(tls: ssl.SSLContext, allow_link_local: bool = False) -> aiohttp.TCPConnector:
    """The connector of the pulls' HTTP client: ``tls`` for HTTPS, link-local addresses refused unless allowed."""
    if allow_link_local:
        return aiohttp.TCPConnector(ssl=tls)
    return aiohttp.TCPConnector(ssl=tls, socket_factory=refusing_socket)
