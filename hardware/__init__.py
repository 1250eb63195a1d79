"""Export and drivers for real robots, with the safety layer (depends on ``policies`` only)."""
