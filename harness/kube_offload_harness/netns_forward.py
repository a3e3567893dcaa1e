"""A TCP forwarder from a network namespace's loopback to the machine's loopback.

kwokctl binds each cluster's kube-apiserver to 127.0.0.1 of the machine's namespace (the
harness's rule: nothing listens elsewhere). A real node's kubelet runs in a namespace of
its own, whose 127.0.0.1 is another interface. This process listens on ``--listen`` inside
``--netns`` and connects each accepted connection to ``--to`` in its own (the machine's)
namespace: the kubelet's kubeconfig keeps ``https://127.0.0.1:<port>``, which the
apiserver's certificate already names, and no address but loopback is involved.

A socket stays in the namespace it was created in, so only the listening socket is
created after ``setns(2)`` into the node's namespace (Python 3.11 has no os.setns: libc).

Run as ``python -m kube_offload_harness.netns_forward --netns /run/netns/kon-0
--listen 127.0.0.1:6443 --to 127.0.0.1:6443``.

Without ``--netns`` it listens in its own namespace: the machine's end of a node's link
(``--listen 172.31.250.1:6443``), the apiserver's advertised address that pods reach
through the ``kubernetes`` Service (docs/real-nodes.md, "Addresses").
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys

from kube_offload_harness.netns import setns


def listen(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    return sock


def listen_in_netns(netns_path: str, host: str, port: int) -> socket.socket:
    """A listening socket created inside ``netns_path``; the caller's thread returns to its
    own namespace afterwards (call before starting other threads)."""
    with open("/proc/thread-self/ns/net") as own_ns:
        setns(netns_path)
        try:
            sock = listen(host, port)
        finally:
            setns(f"/proc/self/fd/{own_ns.fileno()}")
    return sock


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except OSError:
            pass


def _split(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


async def _serve(listener: socket.socket, to: tuple[str, int]) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*to)
        except OSError as exc:
            print(f"netns-forward: cannot reach {to[0]}:{to[1]}: {exc}", file=sys.stderr, flush=True)
            writer.close()
            return
        await asyncio.gather(_pump(reader, up_writer), _pump(up_reader, writer))

    server = await asyncio.start_server(handle, sock=listener)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--netns", help="path of the namespace to listen in (/run/netns/<name>); default: this one")
    parser.add_argument("--listen", required=True, help="host:port inside that namespace")
    parser.add_argument("--to", required=True, help="host:port in this process's namespace")
    args = parser.parse_args(argv)
    listener = listen_in_netns(args.netns, *_split(args.listen)) if args.netns else listen(*_split(args.listen))
    print(f"netns-forward: {args.netns or 'own namespace'} {args.listen} -> {args.to}", flush=True)
    asyncio.run(_serve(listener, _split(args.to)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
