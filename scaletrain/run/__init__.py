"""The `Run` that `scaletrain.init` returns, and its facets (collectives, checkpoints,
records, memory), each a module of its own mixed into the one class."""
