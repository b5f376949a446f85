"""``python -m bot.cli``: what the ``approval-bot`` script runs."""

import sys

from bot.cli.app import main

sys.exit(main())
