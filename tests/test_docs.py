"""The README and the notes link to files and sections that exist (a renamed heading or a moved
result file breaks a link silently otherwise)."""

import glob
import os
import re

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = ["README.md", "experiments/HISTORY.md", *sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "pallas_kernels", "*.md")))]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation other than '-' and '_' dropped,
    spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _without_code_blocks(text: str) -> str:
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(path: str) -> set[str]:
    """The anchors of a markdown file's headings (a repeated heading gets '-1', '-2', ...)."""
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.*?)\s*$", _without_code_blocks(open(path).read()), re.M):
        s = _slug(m.group(1))
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def broken_links(md: str) -> list[str]:
    """Relative links of ``md`` (a path under the repository, or absolute) whose file or heading is missing."""
    path = os.path.join(REPO, md)
    bad = []
    for m in re.finditer(r"\]\(([^)\s]+)\)", _without_code_blocks(open(path).read())):
        target = m.group(1)
        if re.match(r"[a-z]+:", target):  # http:, https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(path), file)) if file else path
        if not os.path.exists(full):
            bad.append(f"{target}: no such file")
        elif anchor and full.endswith(".md") and anchor not in anchors(full):
            bad.append(f"{target}: no such heading")
    return bad


def test_slug_and_anchors(tmp_path):
    assert _slug("Train-rollout alignment (`trace_jax.diagnose`, random-init policies)") == \
        "train-rollout-alignment-trace_jaxdiagnose-random-init-policies"
    f = tmp_path / "a.md"
    f.write_text("# Setup\n\n```\n# not a heading\n```\n## Setup\n[x](#setup-1) [y](#nope)\n")
    assert anchors(str(f)) == {"setup", "setup-1"}
    (tmp_path / "b.md").write_text("[a](a.md#setup) [b](c.md) [c](https://x.org/#nope)\n")
    assert broken_links(str(f)) == ["#nope: no such heading"]
    assert broken_links(str(tmp_path / "b.md")) == ["c.md: no such file"]


@pytest.mark.parametrize("md", DOCS)
def test_relative_links_resolve(md):
    assert broken_links(md) == []
