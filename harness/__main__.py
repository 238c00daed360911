"""`python -m harness --model NAME --tasks all ...` (and `list`, `validate`, `table`, `push`,
`pr-eval-results`): see harness/cli/."""

import sys

from harness.cli import main

if __name__ == "__main__":
    sys.exit(main())
