"""``python -m hostcap.ctl.audit``: the audit commands on their own."""

from __future__ import annotations

import sys

from hostcap.ctl.audit.cli import main

sys.exit(main())
