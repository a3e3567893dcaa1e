"""A UDP relay in the machine's namespace: what a cloud's UDP load balancer is to a
gateway's Service (docs/real-nodes.md, "The gateways between the clusters").

The machine never forwards (its ip_forward stays 0), so a real node cannot reach another
node's address through it. Each gateway is therefore given, as its peer's endpoint, an
address the machine owns on the peer's node link (``172.31.250.4k+1:<port>``); this process
listens there and relays each datagram to the gateway on the node (``172.31.250.4k+2:<port>``),
one upstream socket per sender so that the answers find their way back, as a NAT's mapping
does. WireGuard sees the relay as the path, and roams with it.

Run as ``python -m kube_offload_harness.udp_relay --listen 172.31.250.5:51920 --to
172.31.250.6:51920``.
"""

from __future__ import annotations

import argparse
import asyncio
import sys


class _Upstream(asyncio.DatagramProtocol):
    def __init__(self, front: asyncio.DatagramTransport, client: tuple[str, int]) -> None:
        self.front, self.client = front, client

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        self.front.sendto(data, self.client)


class _Front(asyncio.DatagramProtocol):
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.transport: asyncio.DatagramTransport | None = None
        self.upstreams: dict[tuple[str, int], asyncio.DatagramTransport] = {}
        self.pending: dict[tuple[str, int], list[bytes]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        upstream = self.upstreams.get(addr)
        if upstream is not None:
            upstream.sendto(data)
            return
        if addr in self.pending:
            self.pending[addr].append(data)
            return
        self.pending[addr] = [data]
        asyncio.get_running_loop().create_task(self._open(addr))

    async def _open(self, addr: tuple[str, int]) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: _Upstream(self.transport, addr),  # type: ignore[arg-type]
                                                           remote_addr=self.target)
        self.upstreams[addr] = transport
        for data in self.pending.pop(addr, []):
            transport.sendto(data)


def _address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


async def serve(listen: tuple[str, int], target: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    await loop.create_datagram_endpoint(lambda: _Front(target), local_addr=listen)
    print(f"udp-relay {listen[0]}:{listen[1]} -> {target[0]}:{target[1]}", flush=True)
    await asyncio.Event().wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT in the machine's namespace")
    parser.add_argument("--to", required=True, help="HOST:PORT of the gateway")
    args = parser.parse_args(argv)
    try:
        asyncio.run(serve(_address(args.listen), _address(args.to)))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
