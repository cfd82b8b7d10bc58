"""Batches and data among ranks: what a batch is and where the loss comes from, sharded
loaders, streams dealt among ranks and DataLoader workers, held-out metrics."""
