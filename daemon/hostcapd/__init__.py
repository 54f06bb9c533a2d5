"""hostcapd: the privileged side of hostcap (process spawning and jailed file
access for AI-agent engines, with an audit log of every spawn and write)."""

from hostcap_proto.build import COMMIT, VERSION

#: From git, written at build time (hostcap_proto.build).
__version__ = VERSION
#: The abbreviated commit this build was made from.
__commit__ = COMMIT
