"""`scaletrain doctor`: preflight checks for a launch, each problem with its fix."""
