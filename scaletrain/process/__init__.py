"""One process and its peers: who it is (the launcher's environment), what it runs on
(devices, cores, backends, the network interface), its process group, who launched it, and
how long its start-up took."""
