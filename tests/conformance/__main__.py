import sys

from tests.conformance.run import main

sys.exit(main())
