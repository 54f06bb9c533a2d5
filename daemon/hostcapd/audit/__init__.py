"""The daemon's audit log writer (hostcapd.audit/v1, JSON Lines).

The interface the rest of the daemon uses:

- `AuditLog.open(settings, boot_id)` at start-up (raises `AuditUnavailable`);
- `await log.write_durable(event, **fields)`: appended, flushed and fsynced
  before it returns (process.exec: the write-ahead record);
- `log.write(event, **fields)`: appended now, fsynced within the batch window;
- `await log.close()`.
"""

from hostcapd.audit.log import AuditLog, AuditUnavailable

__all__ = ["AuditLog", "AuditUnavailable"]
