"""``python -m fedshift.claims README.md results/tables/claims.md [--block NAME]`` (:func:`~fedshift.claims.main`)."""

from fedshift.claims.cli import main

raise SystemExit(main())
