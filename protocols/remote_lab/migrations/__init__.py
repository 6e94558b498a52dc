"""The lab database's Alembic migrations (shipped in the package: `lab migrate` needs no source checkout)."""
