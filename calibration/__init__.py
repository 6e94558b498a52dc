"""calibration package."""
