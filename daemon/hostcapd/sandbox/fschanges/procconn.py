"""The proc connector (netlink, NETLINK_CONNECTOR), as the file-change
watcher uses it (decision 0030): its fork events give each new process's
parent before the process can run, its exit events say when a process's
entry may go. A process whose parent is the spawner is a spawn's root; every
process forked beneath it belongs to it, whatever it did later (setsid,
double fork, reparenting)."""

from __future__ import annotations

import socket
import struct

# <linux/connector.h>, <linux/cn_proc.h>
NETLINK_CONNECTOR = 11
CN_IDX_PROC = 1
CN_VAL_PROC = 1
PROC_CN_MCAST_LISTEN = 1
PROC_EVENT_FORK = 0x1
PROC_EVENT_EXIT = 0x80000000
_NLMSG_HDR = struct.Struct("=IHHII")
_CN_MSG = struct.Struct("=IIIIHH")
_PROC_EVENT = struct.Struct("=IIQ")
_FORK = struct.Struct("=iiii")
_EXIT = struct.Struct("=ii")
#: What one recv takes at most.
RECV_SIZE = 65536


def listen() -> socket.socket:
    """A non-blocking socket subscribed to the proc connector's events;
    OSError where it is not available (a pid namespace of its own, netlink
    refused)."""
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC,
                       NETLINK_CONNECTOR)  # fmt: skip
    try:
        nl.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
        nl.bind((0, CN_IDX_PROC))
        payload = struct.pack("=I", PROC_CN_MCAST_LISTEN)
        cn = _CN_MSG.pack(CN_IDX_PROC, CN_VAL_PROC, 0, 0, len(payload), 0) + payload
        nl.send(_NLMSG_HDR.pack(_NLMSG_HDR.size + len(cn), 3, 0, 0, 0) + cn)
        nl.setblocking(False)
    except OSError:
        nl.close()
        raise
    return nl


def apply(data: bytes, spawner: int, table: dict[int, int], exited: list[int]) -> None:
    """Apply one datagram's fork and exit events to `table` (pid -> its
    spawn's root pid): a child of `spawner` is a root, a child of a known pid
    belongs to that pid's root, any other forked pid is forgotten (a reused
    pid is not its old self). Known processes that exited are appended to
    `exited` (their entries go once the fanotify queue is read past them)."""
    offset = 0
    while offset + _NLMSG_HDR.size <= len(data):
        length = _NLMSG_HDR.unpack_from(data, offset)[0]
        if length < _NLMSG_HDR.size:
            break
        body = offset + _NLMSG_HDR.size + _CN_MSG.size
        if body + _PROC_EVENT.size <= offset + length:
            what = _PROC_EVENT.unpack_from(data, body)[0]
            at = body + _PROC_EVENT.size
            if what == PROC_EVENT_FORK:
                _ppid, ptgid, cpid, ctgid = _FORK.unpack_from(data, at)
                if cpid == ctgid:  # a process, not a thread
                    if ptgid == spawner and spawner:
                        table[ctgid] = ctgid
                    elif ptgid in table:
                        table[ctgid] = table[ptgid]
                    else:
                        table.pop(ctgid, None)  # a reused pid is not its old self
            elif what == PROC_EVENT_EXIT:
                pid, tgid = _EXIT.unpack_from(data, at)
                if pid == tgid and tgid in table:
                    exited.append(tgid)
        offset += (length + 3) & ~3
