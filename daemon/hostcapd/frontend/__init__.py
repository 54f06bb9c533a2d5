"""The front-end: the unprivileged process that serves one socket (a tenant's,
or the admin one). It parses every byte its clients send (HTTP/2 and
protobuf), confines itself (`confine`), and relays each call to the daemon
over the channel (`hostcapd.bridge`) as a typed message. Run as
`python -I -m hostcapd.frontend FD` by the daemon
(`hostcapd.bridge.frontends.FrontendProcess`)."""
