"""``python -m fedshift.docsgen {config,readme,pages} ...`` (:func:`fedshift.docsgen.pages.main`)."""

from fedshift.docsgen.pages import main

raise SystemExit(main())
