"""The rehearsal's ``standin`` section (moved here from :mod:`fedshift.config`, which no longer imports the data
layer: the check needs :data:`fedshift.data.standin.STANDINS`, and only validation runs it)."""

from __future__ import annotations

from typing import Any

from fedshift.errors import ConfigError

__all__ = ["check_standin"]


def check_standin(config: dict[str, Any]) -> None:
    """Check the rehearsal's ``standin`` section: stand-ins only at ``scale: rehearsal``, for known datasets.

    Raises
    ------
    ConfigError
        ``standin.datasets`` is set without ``scale: rehearsal`` (stand-in data must never feed a result), or
        names a dataset that is not in the registry or has no generator (:data:`fedshift.data.standin.STANDINS`).
    """
    names = config.get("standin", {}).get("datasets", [])
    if not names:
        return
    if config.get("scale") != "rehearsal":
        raise ConfigError("config error at standin.datasets: stand-in data is for the rehearsal only; set "
                          "scale: rehearsal (config/rehearsal.yaml) or remove standin")
    from fedshift.data.standin import STANDINS

    for name in names:
        if name not in config["datasets"]:
            raise ConfigError(f"config error at standin.datasets: {name!r} is not a registry dataset")
        if name not in STANDINS:
            raise ConfigError(f"config error at standin.datasets: no stand-in generator for {name!r}; known: "
                              f"{sorted(STANDINS)}")
