"""`scaletrain plan`: predict step time, speedup, efficiency and memory per device for each
strategy and world size from a few measurements of one process and one collective."""
