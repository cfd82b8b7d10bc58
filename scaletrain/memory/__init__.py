"""A process's memory: the meter (baseline, current, training peak), steady memory on a
CPU, and the memory allocator every process scaletrain starts runs."""
