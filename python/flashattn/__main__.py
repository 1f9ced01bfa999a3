"""`python -m flashattn ...` runs the command-line tool, as the `flashattn` command does."""
from ._cli import main

main()
