#!/usr/bin/env bash
# Installs everything the test suite needs on a Debian machine, then runs it.
#   bash scripts/test.sh            # the whole suite
#   bash scripts/test.sh -k detect  # extra arguments go to pytest
# The tests start real components: Open MPI's mpirun, a one-node Slurm (slurm-wlm + munge)
# and two hosts in network namespaces (iproute2), so those are installed here too; and the CPU
# memory allocators training processes are given (tcmalloc, the default where installed, and
# jemalloc, which --allocator can choose).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v mpirun >/dev/null || need+=(openmpi-bin)
command -v slurmctld >/dev/null || need+=(slurm-wlm)
command -v munged >/dev/null || need+=(munge)
command -v ip >/dev/null || need+=(iproute2)
command -v pkill >/dev/null || need+=(procps)
has_library() { ls /usr/lib/*/"$1" /usr/lib64/"$1" /usr/lib/"$1" >/dev/null 2>&1; }
has_library libtcmalloc_minimal.so.4 || need+=(libtcmalloc-minimal4)
has_library libjemalloc.so.2 || need+=(libjemalloc2)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/test.sh: these Debian packages are missing: ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
    exit 2
  fi
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# constraints.txt pins torch to the build installed on these machines (no CUDA download).
# The trackers are extras; their tests read each tool's own files back, so CI installs them.
python3 -m pip install -q -c constraints.txt -e ".[test,trackers]"
python3 -m pytest "$@"
