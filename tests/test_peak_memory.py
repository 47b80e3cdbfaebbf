"""The peak memory that the scale experiment, the scale benchmark and the memory tests
report is the process's own, also in a process started by a larger one."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from fedsparse._resources import peak_memory

# A parent that has held 1 GiB starts a child that allocates 256 MiB: the child's
# ru_maxrss is the parent's peak (Linux keeps it across the vfork and exec of subprocess).
_PARENT = textwrap.dedent("""
    import json, resource, subprocess, sys
    import numpy as np
    big = np.ones(1 << 27)  # 1 GiB, touched
    del big
    child = '''
    import json, resource
    import numpy as np
    from fedsparse._resources import peak_memory
    before = peak_memory()
    a = np.ones(1 << 25)  # 256 MiB, touched
    print(json.dumps({"before": before, "after": peak_memory(),
                      "ru_maxrss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
    '''
    print(subprocess.run([sys.executable, "-c", child], capture_output=True, text=True,
                         check=True).stdout)
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM is Linux's")
def test_a_child_of_a_large_process_reports_its_own_peak():
    out = subprocess.run([sys.executable, "-c", _PARENT], capture_output=True, text=True,
                         timeout=120, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["ru_maxrss"] > 1 << 30  # what the old measure said: the parent's gigabyte
    assert r["before"] < 600 << 20  # the child itself: the interpreter, NumPy, torch
    assert 250 << 20 < r["after"] - r["before"] < 300 << 20  # and the array it touched


def test_the_peak_is_this_processs_in_bytes():
    assert peak_memory() > 10 << 20  # this interpreter with torch loaded: tens of MB at least
