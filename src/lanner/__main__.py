"""`python -m lanner`: the same as the `lanner` command."""

from lanner.cli import main

main()
