"""The daemon's audit log writer (hostcapd.audit/v1, JSON Lines, hash-chained).

The interface the rest of the daemon uses:

- `AuditLog.open(settings, boot_id)` at start-up (raises `AuditUnavailable`);
- `await log.write_durable(event, **fields)`: appended, flushed and fsynced
  before it returns (process.exec: the write-ahead record);
- `log.write(event, **fields)`: appended now, fsynced within the batch window;
- `log.open_spawns()` / `log.close_orphans(message)`: the job ledger;
- `log.subscribe()`: records as they are written (for ``audit tail -f``);
- `await log.close()`.

The writer is split by job: `writer` (the chain and rotation), `fsync` (group
commit), `deferred`, `ledger`, `subscriptions`, `files` (names, tail, lock).
The record schema and its hashing live in `hostcap_proto.audit`.
"""

from hostcapd.audit.errors import AuditUnavailable
from hostcapd.audit.subscriptions import AuditSubscription, AuditSubscriptionLagged
from hostcapd.audit.writer import AuditLog

__all__ = ["AuditLog", "AuditSubscription", "AuditSubscriptionLagged", "AuditUnavailable"]
