"""``python -m clew.cli`` is the ``clew`` command (as ``python -m clew``)."""

from clew.cli import main

raise SystemExit(main())
