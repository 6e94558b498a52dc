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

DEFAULT_SESSION_IDLE_S = 3600.0
"""A session without a request for this long may be ended to make room under the cap."""

DEFAULT_MAX_SESSIONS_PER_CLIENT = 16
"""Open sessions one client (one peer address) holds at most, so one client cannot fill the server's cap and lock
everyone else out for the idle window (issue 24: 1,000 sessions in 2.4 s); an agent matrix runs a few cells at
a time, each with one session."""
