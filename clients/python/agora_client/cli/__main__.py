"""``python -m agora_client.cli``: the same as ``agora-hub-client``."""

import sys

from agora_client.cli import main

sys.exit(main())
