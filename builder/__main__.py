"""``python -m trainimg``: the same CLI as the `trainimg` command."""

import sys

from .cli.app import main

sys.exit(main())
