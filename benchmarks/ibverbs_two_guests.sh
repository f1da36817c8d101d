#!/bin/sh
# benchmarks/ibverbs_vs_ib_write_bw.py across the two guests of `scripts/rdma_guest.py run
# --hosts 2` (one rank on each; ib_write_bw's server on rchost1): run in both guests,
#   sh benchmarks/ibverbs_two_guests.sh VENV PYTHONPATH [benchmark arguments...]
# rchost0 launches with MPICH's hydra, whose proxy reaches rchost1 through
# scripts/guest_rsh.py (the guests have no ssh); rchost1 serves that one command.
venv=$1 path=$2
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
rsh="$here/scripts/guest_rsh.py"
if [ "$HOST_INDEX" = 0 ]; then
  exec env PYTHONPATH="$path" "$venv/bin/mpiexec" -launcher rsh -launcher-exec "$rsh" -localhost 10.9.0.1 \
    -hosts 10.9.0.1:1,10.9.0.2:1 -n 2 -genv PYTHONPATH "$path" -genv OPENBLAS_NUM_THREADS 1 \
    "$venv/bin/python" "$here/benchmarks/ibverbs_vs_ib_write_bw.py" --peer-address 10.9.0.2 "$@"
else
  exec "$venv/bin/python" "$rsh" serve
fi
