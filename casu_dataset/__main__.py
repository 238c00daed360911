import sys

from .cli import main
from .log import setup_console_logging

setup_console_logging()
sys.exit(main())
