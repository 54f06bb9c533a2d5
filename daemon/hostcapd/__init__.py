"""hostcapd: the privileged side of hostcap (process spawning and jailed file
access for AI-agent engines, with an audit log of every spawn and write)."""

__version__ = "0.1.0"
