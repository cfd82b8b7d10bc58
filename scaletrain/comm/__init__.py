"""`scaletrain comm`: how fast the collectives are, in the manner of nccl-tests."""
