"""What a release wheel's extension modules ask of the system, checked (scripts/build_wheels.sh).

    python wheel_elf_check.py WHEEL

For each shared object in the wheel: the libraries it needs (DT_NEEDED) must be glibc's
own (libibverbs and the CUDA runtime are loaded at run time, never linked), and every
symbol it leaves undefined must carry a glibc symbol version, or be Python's (the
interpreter defines them), or be weak. An unversioned undefined symbol is one that Zig's
glibc 2.17 stubs do not define: the module would load only where a newer glibc happens
to define it, which auditwheel cannot see. Nothing may be bundled (no `*.libs/` folder).
Prints what each module needs; exits 1 on any violation. Needs pyelftools (auditwheel's)."""

from __future__ import annotations

import io
import re
import sys
import zipfile

from elftools.elf.dynamic import DynamicSection
from elftools.elf.elffile import ELFFile
from elftools.elf.gnuversions import GNUVerSymSection

GLIBC = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1", "ld-linux-x86-64.so.2"}
PYTHON = re.compile(r"_?Py")


def check(name: str, data: bytes) -> list[str]:
    elf = ELFFile(io.BytesIO(data))
    needed = [t.needed for s in elf.iter_sections() if isinstance(s, DynamicSection) for t in s.iter_tags("DT_NEEDED")]
    print(f"{name}: needs {', '.join(needed)}")
    errors = [f"{name} links {lib}, which is not glibc's" for lib in needed if lib not in GLIBC]
    dynsym = elf.get_section_by_name(".dynsym")
    versym = next((s for s in elf.iter_sections() if isinstance(s, GNUVerSymSection)), None)
    unversioned = []
    for i, sym in enumerate(dynsym.iter_symbols()):
        if i == 0 or sym["st_shndx"] != "SHN_UNDEF" or sym["st_info"]["bind"] == "STB_WEAK":
            continue
        index = versym.get_symbol(i)["ndx"] if versym is not None else "VER_NDX_GLOBAL"
        if index in ("VER_NDX_LOCAL", "VER_NDX_GLOBAL") and not PYTHON.match(sym.name):
            unversioned.append(sym.name)
    if unversioned:
        errors.append(f"{name} leaves undefined without a glibc version: {', '.join(sorted(unversioned))}")
    return errors


def main() -> int:
    errors = []
    with zipfile.ZipFile(sys.argv[1]) as whl:
        for entry in whl.namelist():
            if re.match(r"[^/]+\.libs/", entry):
                errors.append(f"bundled by auditwheel: {entry}")
            elif re.search(r"\.so(\.|$)", entry):
                errors += check(entry, whl.read(entry))
    for e in errors:
        print(f"wheel_elf_check: {e}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
