import sys

from hostcapd.cli import main

sys.exit(main())
