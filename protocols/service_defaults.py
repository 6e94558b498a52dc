"""The chamber tools API's default service limits, in a module that imports nothing.

Why outside protocols/api: the CLI shows these defaults in `serve --help`, and building the parser runs for every
command. Importing them from protocols.api ran the package's __init__ (FastAPI, the protocol registry, scipy):
`chamberlab --help` went from 0.1 s to about 2 s. The API's modules take their defaults from here too, so each
number is written once.
"""

DEFAULT_LEASE_TIMEOUT_S = 60.0
"""Seconds a session may sit idle before another session can take the chamber."""

DEFAULT_MAX_HOLD_S = 600.0
"""The longest one session keeps the lease while another asks for it (a protocol run on the real chamber takes
a few minutes, so ten minutes never cuts one short)."""

DEFAULT_MAX_SESSIONS = 1000
"""Open sessions one server holds at most (the main job opens one per claim, 49, one at a time)."""

DEFAULT_SESSION_IDLE_S = 300.0
"""A session without a request (and no call in flight) for this long is ended as abandoned, and the chambers it
used are handed back safe (issue 31: at 3600 s an abandoned session left its fan at 0.7 for an hour).
Why five minutes: long enough for an agent that thinks between calls (a model turn on a local model can take a
minute; every request of the session, a status or a plan included, counts as activity, and a call in flight is
never idle), short enough that a client that died leaves no chamber running unattended for long. Why not the
lease timeout (60 s): a lapsed lease only lets *another* session take the chamber (its take brings the chamber to
rest first); returning it then, while the holder is still open and thinking, would change its staging between
its stage_conditions and its measure without telling it."""

DEFAULT_SWEEP_S = 1.0
"""How often the served API looks for abandoned sessions (a pass over the open sessions: microseconds); an
abandoned session is handed back within the idle limit plus this."""

DEFAULT_MAX_SESSIONS_PER_CLIENT = 16
"""Open sessions one client (one peer address) holds at most, so one client cannot fill the server's cap and lock
everyone else out for the idle window (issue 24: 1,000 sessions in 2.4 s); an agent matrix runs a few cells at
a time, each with one session."""
