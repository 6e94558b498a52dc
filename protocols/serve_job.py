"""`serve`: the chamber tools API in front of the connected chambers until a stop signal, then left safe.

Why its own module: refusing an unsafe bind before anything opens (a non-loopback address needs a token), opening
the chambers, serving the API under uvicorn and removing a record folder it made if it fails are one job of the
protocols floor; the CLI passes plain values and renders the `on_ready` data (`serve_text`). A port already in use
is refused before any chamber opens (PortInUse, one line with the way out); after a stop the job returns its exit
code (protocols/exit_codes.py: 3 when a chamber's safe state was not confirmed) and says, as every command does,
each chamber's safe state as read back (`safe state confirmed on wt: load_in=0, load_out=0 (read back)`).

The stop (issue 31: it took ~18 s): any of chamber.stop.STOP_SIGNALS; the server stops taking chamber work and
cuts a call in flight short (protocols/api/server.py), then the chambers are made safe and read back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import socket
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from protocols.exit_codes import exit_code, outcomes_of, unconfirmed_note
from protocols.bench_job import open_lab


class PortInUse(OSError):
    """The TCP port asked for is taken by another process."""


def check_port_free(host: str, port: int) -> None:
    """Refuse a taken `port` on `host` before anything opens, naming the way out (port 0: any free port)."""
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds: TIME_WAIT is no clash
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                return  # another problem (an address not on this host): uvicorn reports it as it binds
            raise PortInUse(f"port {port} on {host} is in use; try --listen-port 0 (any free port)") from None


class ServeRefused(ValueError):
    """A serve request refused before anything opens: a non-loopback bind without a token, a TCP port as --port."""


def serve_token(host: str, token_file: Path | None, port: Sequence[str] | None) -> str | None:
    """The bearer token serve enforces (protocols.api.resolve_token: a non-loopback bind needs one), refused
    before anything opens; a bare number as --port (once serve's TCP port, a serial URL everywhere now) is named
    with the way out."""
    from protocols.api import TokenRequired, resolve_token

    try:
        token = resolve_token(host, token_file=token_file, environ=os.environ)
    except TokenRequired as exc:
        raise ServeRefused(str(exc)) from None
    numbers = [p for p in port or () if p.isdigit()]
    if numbers:
        raise ServeRefused(f"--port: expected a serial URL (device path, pty, socket://host:port), got {numbers[0]}; "
                           f"the TCP port to listen on is --listen-port {numbers[0]}")
    return token


def serve_job(selection: Any, *, host: str, listen_port: int, token: str | None, claims: Mapping[str, Any],
              limits: Path | str | None, record: Path, lease_timeout: float, lease_max_hold: float,
              max_sessions: int, session_idle: float, allowed_host: Sequence[str], verbose: bool,
              on_ready: Callable[[dict[str, Any]], None], say: Callable[[str], None]) -> int:
    """Serve the API over the chambers of `selection` until a signal, then return the exit code of how the
    chambers were left; folders of `record` made here are removed again when serving fails (nothing half-made
    stays). `token` (protocols.api.resolve_token) is checked by the caller before anything opens: a non-loopback
    bind without one never starts; a taken port is refused here, before the chambers open."""
    import threading

    check_port_free(host, listen_port)
    stop = threading.Event()
    made = [d for d in (record, *record.parents) if not d.exists()]
    try:
        safe = _serve_until(selection, stop, token, claims, host=host, listen_port=listen_port, limits=limits,
                     record=record, lease_timeout=lease_timeout, lease_max_hold=lease_max_hold,
                     max_sessions=max_sessions, session_idle=session_idle, allowed_hosts=tuple(allowed_host),
                     verbose=verbose, on_ready=on_ready, say=say)
        for outcome in safe:  # an unconfirmed one is said once, below (and warned as the chamber closed)
            if outcome.get("confirmed"):
                say(outcome["text"])
        if note := unconfirmed_note(safe):
            say(note)
        return exit_code({"safe_state": safe})
    except BaseException:
        for folder in made:  # deepest first; rmdir removes only what is still empty
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _serve_until(selection: Any, stop: Any, token: str | None, claims: Mapping[str, Any], *, host: str,
                 listen_port: int, limits: Any, record: Path, lease_timeout: float, lease_max_hold: float,
                 max_sessions: int, session_idle: float, allowed_hosts: tuple[str, ...], verbose: bool,
                 on_ready: Callable[[dict[str, Any]], None], say: Callable[[str], None]) -> list[dict[str, Any]]:
    """Serve until `stop` is set (by a stop signal); returns the chambers' safe-state outcomes."""
    import signal

    from chamber.stop import STOP_SIGNALS, handled_by
    from protocols.api import create_app
    from protocols.api.live import claim_bound
    from protocols.api.server import serve_in_thread

    received: list[str] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signal.Signals(signum).name)
        stop.set()

    # the handler once the chambers are open (a signal while they connect interrupts the connect, as in every
    # command); their exit path then defers signals itself while it makes them safe
    with open_lab(selection, say) as opened, handled_by(on_signal, STOP_SIGNALS):  # safe state, then close, on exit
        app = create_app(opened.chambers, limits=limits, record_dir=record, token=token,
                         lease_timeout_s=lease_timeout, claims=claims, lease_max_hold_s=lease_max_hold,
                         max_sessions=max_sessions, session_idle_s=session_idle, allowed_hosts=allowed_hosts)
        app.state.live.record_bounds({c.id: claim_bound(c) for c in claims.values()})  # the claim line's bound
        with serve_in_thread(app, host=host, port=listen_port, log_level="info" if verbose else "warning") as url:
            on_ready({"url": url, "openapi": f"{url}/openapi.json", "live_view": f"{url}/",
                      "chambers": sorted(opened.chambers), "record_dir": str(record),
                      "auth": "bearer token" if token else "none (loopback only)",
                      "lease_timeout_s": lease_timeout, "lease_max_hold_s": lease_max_hold,
                      "max_sessions": max_sessions, "session_idle_s": session_idle,
                      "allowed_hosts": list(allowed_hosts), "pid": os.getpid()})
            stop.wait()
            say(f"stopping the chamber tools API ({received[0] if received else 'asked'}): making the chambers "
                "safe")
    return outcomes_of(opened)


def serve_text(d: Mapping[str, Any]) -> str:
    return (f"serving the chamber tools API at {d['url']} (chambers: {', '.join(d['chambers'])}; auth: {d['auth']}; "
            f"records: {d['record_dir']})\nlive view: {d['live_view']}\nstop with Ctrl-C")


def simulated_service(stack: contextlib.ExitStack, api_dir: Path, claims: Mapping[str, Any],
                      say: Callable[[str], None]) -> str:
    """Both simulated chambers behind the chamber tools API on 127.0.0.1 (a free port), closed with `stack`: the
    phase-two service of `extract` and `matrix` when no --chamber-url is given."""
    from chamber.selection import ChamberSelection, open_chambers
    from protocols.api.server import running_api

    opened = stack.enter_context(open_chambers(ChamberSelection(backend="sim")))
    url = stack.enter_context(running_api(opened.chambers, record_dir=api_dir, claims=claims))
    say(f"chamber tools API on the simulator at {url}")
    return url
