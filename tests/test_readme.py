"""The README's structure, never its prose or figures: its two commands are what CI and the book's front page run,
every `labkit.<name>` it mentions exists, and every notebook has a row in its table."""
import importlib
import re
from pathlib import Path

import labkit
from labkit import site

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _code_lines() -> list[str]:
    blocks = re.findall(r"```(?:bash|sh|console|python)?\n(.*?)```", README, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_the_two_commands_are_what_ci_and_the_front_page_run():
    lines = _code_lines()
    ci = (ROOT / ".ci" / "run").read_text()
    for command in (site.BOOK_COMMAND, site.TEST_COMMAND):
        assert command in lines, f"README lost the command the front page prints: {command}"
        assert command in ci, f".ci/run does not run the README's command: {command}"
    # the maintainers' GPU pass, which the front page prints too, is in CONTRIBUTING.md
    assert site.GPU_COMMAND in (ROOT / "CONTRIBUTING.md").read_text()


def _resolve(dotted: str):
    """labkit.a.b.c as an attribute chain, importing submodules where an attribute is a module not yet loaded."""
    obj, parts = labkit, dotted.split(".")[1:]
    for i, part in enumerate(parts):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(["labkit", *parts[: i + 1]]))
    return obj


def test_every_labkit_name_the_readme_mentions_exists():
    names = set(re.findall(r"\blabkit(?:\.[A-Za-z_]\w*)+", README))
    assert "labkit.layer_norm" in names and "labkit.explain" in names
    for name in sorted(names):
        _resolve(name.rstrip("."))  # AttributeError / ImportError names what the README promises in vain


def test_every_notebook_has_a_row_in_the_readme_table():
    rows = set(re.findall(r"^\| `(\d\d_\w+)` \|", README, re.M))
    notebooks = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert notebooks and rows == notebooks, (sorted(notebooks - rows), sorted(rows - notebooks))
