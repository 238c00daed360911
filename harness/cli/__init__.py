"""`python -m harness`: one module per subcommand (run, list, validate, table, push and
pr-eval-results), `main` dispatching to them."""

from harness.cli.main import main

__all__ = ["main"]
