import sys

from tests.benchmarks.runner import main

sys.exit(main())
