"""The daemon's services (ProcessService, HostService, FsService per tenant,
each bound at construction to its tenant; AdminService over all of them):
they take the channel's typed requests (`hostcapd.bridge.messages`) and
answer with its typed messages, or raise `hostcapd.errors.Refusal`. Nothing
here imports gRPC or protobuf: only the front-end (`hostcapd.frontend`)
converts between the wire and the channel. Also the served sockets
(`servers`, `sockets`) and the audited refusal (`refusals`)."""
