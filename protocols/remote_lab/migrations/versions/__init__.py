"""One module per schema revision, oldest first: 0001 is the schema of the first Remote Lab (before issue 32)."""
