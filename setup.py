"""The build step pyproject.toml cannot say: kernels/ and host/ stay at the repository's top (one copy of each file
in the checkout) and ship inside the package as labkit/_sources/kernels and labkit/_sources/host, byte for byte,
where labkit.core.sources reads them first. Everything else about the package is in pyproject.toml."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

# repository folder -> its place in the built package (labkit.core.sources.PACKAGED; tests/test_sources.py holds
# the two equal)
SHIPPED = {"kernels": "labkit/_sources/kernels", "host": "labkit/_sources/host"}


def shipped_files(folder: Path) -> list[Path]:
    """Every file under `folder`, hidden ones and bytecode caches left out (editor and interpreter leftovers)."""
    return sorted(p for p in folder.rglob("*") if p.is_file()
                  and not any(part.startswith(".") or part == "__pycache__" for part in p.relative_to(folder).parts))


class BuildWithSources(build_py):
    def run(self):
        super().run()
        if self.editable_mode:
            return  # an editable install reads the checkout itself (labkit.core.sources)
        for folder, dest in SHIPPED.items():
            target = Path(self.build_lib) / dest
            shutil.rmtree(target, ignore_errors=True)  # a file deleted from the checkout must leave the wheel too
            for src in shipped_files(Path(folder)):
                out = target / src.relative_to(folder)
                out.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, out)


if __name__ == "__main__":
    setup(cmdclass={"build_py": BuildWithSources})
