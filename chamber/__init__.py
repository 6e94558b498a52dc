"""chamber package."""
