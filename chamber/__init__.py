"""chamber: the Chamber driver (variables, limits, serial and in-process backends).

`open_chamber(...)` is the entry point: a connected Chamber over any pyserial URL, a Remote Lab chamber over HTTP
(`lab+http://...`, chamber/remote_lab_backend.py), or over the emulated firmware in this process (`backend="sim"`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chamber.driver import Chamber
from chamber.errors import (BoardUnresponsive, ChamberHalted, FirmwareError, FrameRejected, InvalidSetting, LinkLost,
                            NoBoardAnswered)
from chamber.frame import Frame
from chamber.limits import OperatorLimits, load_limits
from chamber.safe_state import SafeStateUnconfirmed

__all__ = ["BoardUnresponsive", "Chamber", "ChamberHalted", "FirmwareError", "Frame", "FrameRejected", "InvalidSetting", "LinkLost",
           "NoBoardAnswered", "OperatorLimits", "SafeStateUnconfirmed", "load_limits", "open_chamber"]


def open_chamber(port: str | None = None, *, backend: str = "serial", chamber: str = "wt", seed: int = 0,
                 params: dict | None = None, limits: OperatorLimits | dict | str | Path | None = None,
                 config: str = "standard", timing: Any = None,
                 lab_credentials: tuple[str, str] | str | Path | None = None, journal_dir: Path | None = None,
                 **kwargs: Any) -> Chamber:
    """A connected Chamber. backend "serial" needs `port`: any pyserial URL (`journal_dir`: the folder of the port's
    link journal, firmware_bridge/link_journal.py, so that a board a killed process left mid-session is found at
    once; None: no journal), or a Remote Lab chamber `lab+http://HOST:PORT/v0/CHAMBER_ID[?config=NAME]` (then
    `lab_credentials`: (user, password) or the client's .ini file); "sim" runs the firmware in-process."""
    if backend == "serial" and port and str(port).startswith("lab+"):
        from chamber.remote_lab_backend import (CredentialsError, RemoteLabBackend, parse_remote_lab_url,
                                                read_credentials)

        endpoint, chamber_id, lab_config = parse_remote_lab_url(str(port))
        if lab_credentials is None:
            raise CredentialsError(f"a Remote Lab chamber ({port}) needs credentials: (user, password) or the "
                                   "client's .ini file ([api_keys] user, password)")
        user_password = lab_credentials if isinstance(lab_credentials, tuple) else read_credentials(lab_credentials)
        chosen: Any = RemoteLabBackend(endpoint, chamber_id, lab_config, user_password)
    elif backend == "serial":
        if not port:
            raise ValueError("backend 'serial' needs a port URL (device path, pty, socket://host:port or "
                             "lab+http://HOST:PORT/v0/CHAMBER_ID)")
        from chamber.serial_backend import SerialBackend
        from firmware_bridge.session import Timing

        chosen = SerialBackend(port, timing=timing or Timing(), journal_dir=journal_dir)
    elif backend == "sim":
        from chamber.sim_backend import SimBackend

        chosen = SimBackend(chamber, config=config, seed=seed, params=params)
    else:
        raise ValueError(f"backend must be 'serial' or 'sim', got {backend!r}")
    driver = Chamber(chosen, limits=limits, **kwargs)
    try:
        return driver.connect()
    except BaseException:
        chosen.close()
        raise
