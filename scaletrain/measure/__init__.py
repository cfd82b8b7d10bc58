"""Measuring pieces shared by `bench`, `comm` and `plan`: clocks that do not stall the device,
medians, and the byte counts of a model (parameters, gradients, optimizer state, activations)."""
