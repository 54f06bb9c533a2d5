"""Entry point of the spawner process: python -m hostcapd.spawner FD PARENT_PID."""

import sys

from hostcapd.spawner.process import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
