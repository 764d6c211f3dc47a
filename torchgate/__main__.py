"""``python -m torchgate`` runs the command line."""

from torchgate.cli import main

raise SystemExit(main())
