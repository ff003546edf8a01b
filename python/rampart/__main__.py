import sys

from rampart.cli import main

sys.exit(main())
