"""The memory allocator settings every workflow job starts with (fedshift.jobs.ALLOCATOR_ENV)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from fedshift.jobs import ALLOCATOR_ENV, allocator_environment

# A process that allocates and frees a 64 MiB array 30 times (above glibc's largest default mmap threshold, 32 MiB)
# and reports its minor page faults (4 KiB pages): with glibc's defaults each allocation is a fresh mmap whose pages fault in again.
CHURN = ("import json, resource, numpy as np\n"
         "np._core.multiarray._set_madvise_hugepage(False)\n"  # numpy's own huge pages would hide the faults
         "for _ in range(30):\n"
         "    a = np.ones(8 << 20); del a\n"
         "print(json.dumps(resource.getrusage(resource.RUSAGE_SELF).ru_minflt))")


def _faults(env: dict[str, str]) -> int:
    out = subprocess.run([sys.executable, "-c", CHURN], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_allocator_variables_fill_only_what_the_environment_leaves_unset():
    assert allocator_environment({}) == ALLOCATOR_ENV
    assert set(ALLOCATOR_ENV) == {"THP_MEM_ALLOC_ENABLE", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}
    user = {"MALLOC_TRIM_THRESHOLD_": "131072", "PATH": "/usr/bin"}
    added = allocator_environment(user)
    assert "MALLOC_TRIM_THRESHOLD_" not in added and added["THP_MEM_ALLOC_ENABLE"] == "1"
    assert allocator_environment({**ALLOCATOR_ENV}) == {}


def test_glibc_keeps_large_blocks_under_the_allocator_variables():
    bare = {k: v for k, v in os.environ.items() if k not in ALLOCATOR_ENV}
    default, kept = _faults(bare), _faults({**bare, **ALLOCATOR_ENV})
    # 30 × 16,384 pages of 4 KiB fault in under glibc's defaults; kept in the heap, the block's pages fault in once
    assert default > 30 * 16_000 and kept < default / 4, (default, kept)
