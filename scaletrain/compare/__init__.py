"""`scaletrain report`: runs' folders read back, their curves drawn and their figures compared."""
