"""``python -m trikafka``: the same as the ``trikafka`` command."""

import sys

from trikafka.cli import main

sys.exit(main())
