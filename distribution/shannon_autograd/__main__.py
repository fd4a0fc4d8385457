"""`python -m shannon_autograd ARGS...`: the same as the `shannon` command."""
import sys

from shannon_autograd import main

sys.exit(main())
