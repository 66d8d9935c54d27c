import sys

from genmetrics.cli.main import main

sys.exit(main())
