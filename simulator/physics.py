"""One entry point to the chamber physics: `make_model` builds the PhysicsModel for a chamber, simulated or replayed.

Why one function: the emulated board, the in-process backend, the CLI and the tests all need "the physics of
this chamber, with these parameters, from this seed (or this recording)", and none of them should know which
class implements it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simulator.light_tunnel import LightTunnelModel
from simulator.model import PhysicsModel
from simulator.params import SimParams, params_from
from simulator.replay import ReplayModel, read_recording
from simulator.wind_tunnel import WindTunnelModel

CHAMBERS = ("wt", "lt")
CONFIGS = {"wt": ("standard", "pressure-control"), "lt": ("standard",)}


def make_model(
    chamber: str,
    *,
    config: str = "standard",
    seed: int = 0,
    params: dict | SimParams | None = None,
    recording: str | Path | None = None,
    rng: np.random.Generator | None = None,
) -> PhysicsModel:
    """The physics of `chamber` ("wt" | "lt").

    - recording=None: a simulated model (WindTunnelModel / LightTunnelModel) in `config`, drawing from `rng` if
      given, else from np.random.default_rng(seed); `params` is a loaded parameter-file dict (simulator/params.py
      format), a SimParams, or None for the defaults. reset() re-seeds, so the same seed gives the same rows.
    - recording=path: a ReplayModel serving that CSV's rows (public dataset layout); the CSV decides the layout,
      and it must belong to `chamber` (config is ignored; seed and params do not apply to recorded readings).
    Raises ValueError for an unknown chamber/config, RecordingLayoutError for a CSV of no known layout.
    """
    if chamber not in CHAMBERS:
        raise ValueError(f"unknown chamber {chamber!r}; expected one of {', '.join(CHAMBERS)}")
    if recording is not None:
        rec = read_recording(recording)
        if rec.layout.chamber != chamber:
            raise ValueError(
                f"{recording} is a {rec.layout.chamber}/{rec.layout.config} recording, but chamber {chamber!r} was asked for"
            )
        return ReplayModel(rec)
    if config not in CONFIGS[chamber]:
        raise ValueError(f"unknown config {config!r} for chamber {chamber!r}; expected one of {', '.join(CONFIGS[chamber])}")
    loaded = params_from(params)
    if chamber == "wt":
        return WindTunnelModel(loaded, config=config, rng=rng, seed=seed)
    return LightTunnelModel(loaded, config=config, rng=rng, seed=seed)
