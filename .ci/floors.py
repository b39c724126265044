"""Print dojo's core dependencies pinned to their floors (``name>=X`` -> ``name==X``), one per line.

`make test-floor` installs exactly these, so the lowest versions pyproject.toml allows are the
versions the fast suite ran on. Stdlib only and no tomllib: CI's Python may be 3.10.
"""

import re
import sys
from pathlib import Path

text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text(encoding="utf-8")
block = re.search(r"^dependencies = \[(.*?)^\]", text, re.S | re.M)
if block is None:
    sys.exit("pyproject.toml: no [project] dependencies list")
for dep in re.findall(r'^\s*"([^"]+)"', block.group(1), re.M):
    m = re.match(r"([A-Za-z0-9_.\-\[\]]+)\s*>=\s*([^,;\s]+)", dep)
    if m is None:
        sys.exit(f"pyproject.toml: {dep!r} has no >= floor")
    print(f"{m.group(1)}=={m.group(2)}")
