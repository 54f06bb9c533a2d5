"""The hostcap wire package: the generated hostcap.v1 gRPC code and the other
contracts both sides share (error reasons, the audit record schema)."""
