"""`python -m labkit.sass`: build a committed SASS comparison (see labkit.sass.summary.main)."""
from labkit.sass.summary import main

raise SystemExit(main())
