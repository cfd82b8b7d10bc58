"""Failures of a distributed run: hang detection (watchdog), durations for --timeout."""
