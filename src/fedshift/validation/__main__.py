"""``python -m fedshift.validation FILE...`` (:func:`fedshift.validation.yaml_files.main`)."""

from fedshift.validation.yaml_files import main

raise SystemExit(main())
