"""``python -m bench``: the benchmark harness (see ``bench/run.py``)."""

import sys

from bench.run import main

sys.exit(main())
