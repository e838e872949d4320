"""Fetch the C++ sources hindsight builds from that Debian 12 does not package (run by
scripts/setup), each a pinned PyPI sdist checked by sha256 and unpacked under third_party/.

- xgrammar 0.2.9 (Apache-2.0): the grammar engine behind constrained decoding
  (`response_format`, forced tool calls): its C++ core is built by CMakeLists.txt with the
  Python bindings off (src/grammar/). The sdist carries its own picojson and dlpack headers.

A second run finds the unpacked tree and its stamp and does nothing.
"""
import hashlib
import sys
import tarfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
THIRD = ROOT / "third_party"

SOURCES = [
    {
        "name": "xgrammar-0.2.9",
        "url": "https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-0.2.9.tar.gz",
        "sha256": "87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90",
    },
]


def fetch(src):
    dest = THIRD / src["name"]
    stamp = dest / ".hs-sha256"
    if stamp.is_file() and stamp.read_text().strip() == src["sha256"]:
        return
    THIRD.mkdir(exist_ok=True)
    archive = THIRD / (src["name"] + ".tar.gz")
    print(f"[setup] fetching {src['name']} (PyPI sdist)")
    with urllib.request.urlopen(src["url"], timeout=120) as r:
        data = r.read()
    digest = hashlib.sha256(data).hexdigest()
    if digest != src["sha256"]:
        sys.exit(f"[setup] {src['name']}: sha256 {digest}, expected {src['sha256']}")
    archive.write_bytes(data)
    with tarfile.open(archive) as t:
        for m in t.getmembers():  # no absolute paths, no "..", no links out of the tree
            if m.name.startswith("/") or ".." in Path(m.name).parts or m.issym() or m.islnk():
                sys.exit(f"[setup] {src['name']}: unexpected archive member {m.name!r}")
        t.extractall(THIRD)
    archive.unlink()
    stamp.write_text(src["sha256"] + "\n")


if __name__ == "__main__":
    for s in SOURCES:
        fetch(s)
