"""``python -m bot.cli``: what the ``approval-bot`` script runs."""

import sys

from bot.cli import main

sys.exit(main())
