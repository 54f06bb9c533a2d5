"""python -I -m hostcapd.egress FD: a tenant's egress proxy (started by the daemon)."""

import sys

from hostcapd.egress.proxy import main

sys.exit(main(sys.argv))
