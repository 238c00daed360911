import sys

from casu_dataset.cli import main

sys.exit(main())
