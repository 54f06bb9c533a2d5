"""Test support: a real hostcapd on temporary sockets, and /proc inspection."""
