import sys

from attnkit.cli.main import main

sys.exit(main())
