"""Launchers: how the processes of a job are started (as opposed to strategies: what each does)."""
