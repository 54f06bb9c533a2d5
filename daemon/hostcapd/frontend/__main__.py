"""python -I -m hostcapd.frontend FD: a front-end process (started by the daemon)."""

import sys

from hostcapd.frontend.server import main

sys.exit(main())
