"""The files each spawn changed, from the kernel's fanotify events on the
tenant's own file system (its disk budget's image), attributed to the spawn
by process ancestry (decision 0030).

    watcher = FsChangesWatcher.start(tenant, mount, roots, max_paths)
    watcher.spawner = spawner_client             # its .pid: the roots' parent
    watcher.begin(spawn_pid, cgroup_name)        # once the spawn's pid is known
    changes = await watcher.finish(spawn_pid)    # once its tree is dead

One thread per watched tenant reads two kernel sources and nothing else (no
byte of them comes from a tenant's program):

- a fanotify group with a FAN_MARK_FILESYSTEM mark on the image's mount,
  reporting the parent directory's file handle and the entry's name
  (FAN_REPORT_DFID_NAME_TARGET) for creations, deletions, renames and
  writes, and the pid (tgid) that made each;
- the proc connector (netlink, NETLINK_CONNECTOR), whose fork events give
  each new process's parent before the process can run. A process whose
  parent is the spawner is a spawn's root (its init, or its command without
  a pid namespace); every process forked beneath it belongs to it, whatever
  it did later (setsid, double fork, reparenting). A pid is resolved when
  its event is read, even if the process has exited and been reaped by then
  (a `mv` or `rm` usually has): its entry stays until the fanotify queue
  has been read past its exit.

Where the proc connector is not available (a daemon in a pid namespace of its
own, netlink refused), or lost events (ENOBUFS), a pid is looked up in
/proc/<pid>/cgroup, which only works while the process lives; an event no
spawn can be named for is counted (`unattributed_events`), never guessed.

Memory is bounded: per spawn at most `max_paths` paths are kept, each once
with its kinds of change; events beyond are counted by kind. The directory
path cache and the pid table have fixed caps.

The rooms, each importing only those before it:

- `fanotify`: the group, its mark, an event's info records, a directory
  opened from its handle, and `probe` (what this host offers);
- `procconn`: the proc connector's socket and its fork and exit events;
- `changes`: one spawn's bounded `Changes`;
- `attribution`: the spawns' claims and the cgroup fallback;
- `watcher`: `FsChangesWatcher`, the reader thread tying them together;
- `record`: `describe`, the record's list with sizes and sha256.

This package is the import point: the names others use are here.
"""

from __future__ import annotations

from hostcapd.sandbox.fschanges.changes import KINDS, Changes
from hostcapd.sandbox.fschanges.fanotify import (
    FAN_CREATE,
    FAN_DELETE,
    FAN_MODIFY,
    FAN_MOVED_FROM,
    FAN_MOVED_TO,
    FAN_ONDIR,
    FsChangesUnavailable,
    probe,
)
from hostcapd.sandbox.fschanges.record import describe
from hostcapd.sandbox.fschanges.watcher import (
    BATCH_SECONDS,
    FINISH_TIMEOUT,
    FsChangesWatcher,
)

__all__ = [
    "BATCH_SECONDS",
    "FAN_CREATE",
    "FAN_DELETE",
    "FAN_MODIFY",
    "FAN_MOVED_FROM",
    "FAN_MOVED_TO",
    "FAN_ONDIR",
    "FINISH_TIMEOUT",
    "KINDS",
    "Changes",
    "FsChangesUnavailable",
    "FsChangesWatcher",
    "describe",
    "probe",
]
