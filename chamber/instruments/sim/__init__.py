"""The simulated bench: pyvisa-sim definitions of each instrument (YAML, in this folder) plus a thin dynamics layer.

`open_sim_bench(params=None, seed=None, clock=None)` returns a ResourceManager-like object to pass to the drivers
(or to chamber.instruments.station.open_station); `SimClock` is the clock whose sleep advances time instantly.
"""

from chamber.instruments.sim.dynamics import SimBench, SimClock, SimParams, load_sim_params, open_sim_bench

__all__ = ["SimBench", "SimClock", "SimParams", "load_sim_params", "open_sim_bench"]
