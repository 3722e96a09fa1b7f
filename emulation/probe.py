"""ICMP echo prober with nanosecond timestamps, run inside a testbed host.

    python -m emulation.probe ADDRESS --count 1000 --interval 0.005 --wait 2

iputils ping prints whole milliseconds above 100 ms, too coarse to check a 1 ms error,
and waits long for lost replies. This sends ``count`` echoes ``interval`` s apart on a raw
socket, stops ``wait`` s after the last one, and prints JSON: {"sent": N, "rtt_us": [...]}.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
import time

from common.command import Parser


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def echo_request(ident: int, seq: int, payload: bytes = b"edgetb-probe".ljust(32, b".")) -> bytes:
    header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, seq) + payload


WARM_SEQ = 0xFFFF  # the unrecorded echo that resolves the path first


def echo_reply_seq(packet: bytes, ident: int) -> int | None:
    """The sequence number of ``packet`` (an IPv4 datagram from a raw ICMP socket) when it
    is an echo reply to this prober (``ident``), else None."""
    ihl = (packet[0] & 0x0F) * 4
    kind, _, _, rid, rseq = struct.unpack("!BBHHH", packet[ihl : ihl + 8])
    return rseq if kind == 0 and rid == ident else None


def _await_reply(sock: socket.socket, ident: int, seq: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([sock], [], [], left)[0]:
            return False
        try:
            packet = sock.recv(2048)
        except BlockingIOError:
            continue
        if echo_reply_seq(packet, ident) == seq:
            return True
    return False


def warm_up(sock: socket.socket, ident: int, address: str, tries: int = 5) -> bool:
    """One unrecorded echo answered before measuring: the neighbour (ARP) entries along
    the path are resolved, so the first probes are not dropped from an unresolved
    neighbour's queue (seen: 12 of 100 echoes lost right after the gateway was wired).
    Tries a few times (the link may be lossy); measures anyway when none is answered."""
    for _ in range(tries):
        sock.sendto(echo_request(ident, WARM_SEQ), (address, 0))
        if _await_reply(sock, ident, WARM_SEQ, 1.0):
            return True
    return False


def probe(address: str, count: int, interval_s: float, wait_s: float) -> dict:
    ident = os.getpid() & 0xFFFF
    sock = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    sock.setblocking(False)
    warmed = warm_up(sock, ident, address)
    sent: dict[int, int] = {}
    rtts: dict[int, int] = {}
    start = time.monotonic_ns()
    interval_ns = int(interval_s * 1e9)
    last_send_due = start + (count - 1) * interval_ns
    end = last_send_due + int(wait_s * 1e9)
    seq = 0
    while True:
        now = time.monotonic_ns()
        if seq < count and now >= start + seq * interval_ns:
            sent[seq] = time.monotonic_ns()
            sock.sendto(echo_request(ident, seq), (address, 0))
            seq += 1
            continue
        if (seq >= count and len(rtts) == count) or now >= end:
            break
        next_send = start + seq * interval_ns if seq < count else end
        timeout = max(0.0, (min(next_send, end) - now) / 1e9)
        ready, _, _ = select.select([sock], [], [], timeout)
        while ready:
            try:
                packet = sock.recv(2048)
            except BlockingIOError:
                break
            received = time.monotonic_ns()
            rseq = echo_reply_seq(packet, ident)
            if rseq in sent and rseq not in rtts:
                rtts[rseq] = (received - sent[rseq]) // 1000
    sock.close()
    return {"sent": seq, "rtt_us": [rtts[s] for s in sorted(rtts)], "warmed": warmed}


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m emulation.probe")
    parser.add_argument("address")
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--interval", type=float, default=0.005)
    parser.add_argument("--wait", type=float, default=2.0)
    args = parser.parse_args(argv)
    print(json.dumps(probe(args.address, args.count, args.interval, args.wait)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
