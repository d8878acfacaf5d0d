"""``python -m clew`` is the ``clew`` command."""

from clew.cli import main

raise SystemExit(main())
