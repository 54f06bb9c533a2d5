"""The namespaces of session environments, held by the spawner (issue 30).

An environment is a network namespace (loopback up), an IPC namespace and a
mount namespace with its profile's new root (and so one /tmp and /dev/shm),
made when it is opened and held here until it is closed. Every spawn that
names it joins the three (a copy of the mount namespace: its own /proc), and
still gets its own pid and UTS namespaces, init, cgroup and limits. Unlike
the pools' namespaces (spawner/netns.py, spawner/mntns.py), each of which
serves one spawn, these are shared by the environment's spawns, and by
nothing else: their fds never leave the spawner but to a child joining them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from hostcapd import childsetup, linux
from hostcapd.spawner.messages import RegisterProfile
from hostcapd.spawner.netns import CLONE_NEWNET, _loopback_up

CLONE_NEWIPC = 0x08000000
CLONE_NEWNS = 0x00020000


@dataclass
class Environment:
    netns: int = -1
    ipcns: int = -1
    mntns: int = -1
    #: Why its namespaces could not be made (its spawns fail); "" when made.
    failed: str = ""

    def close(self) -> None:
        for fd in (self.netns, self.ipcns, self.mntns):
            if fd >= 0:
                os.close(fd)
        self.netns = self.ipcns = self.mntns = -1


def _own(flag: int, entry: str, setup: bool = False) -> int:
    """A new namespace of `flag`, made on this thread and left at once: its fd."""
    home = os.open(f"/proc/thread-self/ns/{entry}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        linux.unshare(flag)
        try:
            if setup:
                _loopback_up()
            return os.open(f"/proc/thread-self/ns/{entry}", os.O_RDONLY | os.O_CLOEXEC)
        finally:
            linux.setns(home, flag)
    finally:
        os.close(home)


def make(profile: RegisterProfile, given_netns: int = -1) -> Environment:
    """The namespaces of a new environment of `profile` (the ones its profile
    has; `given_netns`, a copy of it, for its network namespace: the egress
    proxy's); an Environment with `failed` set when one could not be made."""
    env = Environment()
    try:
        if given_netns >= 0:
            env.netns = os.dup(given_netns)
        elif profile.clone_flags & CLONE_NEWNET:
            env.netns = _own(CLONE_NEWNET, "net", setup=True)
        if profile.clone_flags & CLONE_NEWIPC:
            env.ipcns = _own(CLONE_NEWIPC, "ipc")
        if profile.clone_flags & CLONE_NEWNS:
            env.mntns = childsetup.mount_namespace(profile.pooled_mounts)
    except (OSError, childsetup.SetupError, ValueError, TypeError) as error:
        env.close()
        env.failed = f"the environment's namespaces could not be made: {error}"
    return env
