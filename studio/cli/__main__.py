"""``python -m parallel_rag.studio.cli``: the ``parallel-rag`` command."""

import sys

from parallel_rag.studio.cli import main

sys.exit(main())
