"""The error the audit log raises when it cannot record."""


class AuditUnavailable(Exception):
    """The audit log cannot be written; the action it would record must not happen."""
