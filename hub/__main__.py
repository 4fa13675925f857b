import sys

from hub.process.cli import main

sys.exit(main())
