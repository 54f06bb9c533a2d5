"""hostcapctl: the ops and scripting CLI (a thin layer over the wire contract)."""
