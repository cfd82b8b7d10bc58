"""`scaletrain bench`: measured throughput, speedup, efficiency, time breakdown and accuracy
for strategies and world sizes, against the one-process baseline."""
