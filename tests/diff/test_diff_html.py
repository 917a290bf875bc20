"""The HTML report, rendered by Debian's headless chromium.

Chromium loads the file, the test reads back the DOM it built
(--dump-dom) and checks that the kernels, rows and markers are there, that
text from the inputs stayed text, and that the page needs nothing outside
itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser

from kpatch.diff.compare import diff_inputs
from kpatch.diff.html import render_html, write_html

from .conftest import objdump, read, text_file_offset, write

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Node:
    def __init__(self, tag: str, attrs: dict, parent: "Node | None"):
        self.tag, self.attrs, self.parent = tag, attrs, parent
        self.children: list[Node | str] = []

    @property
    def classes(self) -> set[str]:
        return set((self.attrs.get("class") or "").split())

    def text(self) -> str:
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            if isinstance(c, Node):
                yield from c.iter()

    def find_all(self, tag: str | None = None, cls: str | None = None, **attrs) -> list["Node"]:
        return [n for n in self.iter() if (tag is None or n.tag == tag) and (cls is None or cls in n.classes)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]


class TreeBuilder(HTMLParser):
    """A DOM from chromium's serialisation (the test's own, small parser)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        node = Node(tag, dict(attrs), self.cur)
        self.cur.children.append(node)
        if tag not in VOID:
            self.cur = node

    def handle_endtag(self, tag):
        n = self.cur
        while n is not None and n.tag != tag:
            n = n.parent
        if n is not None and n.parent is not None:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


def chromium_dom(chromium: str, html_path: str, tmp_path) -> Node:
    profile = tmp_path / "chromium-profile"
    profile.mkdir(exist_ok=True)
    out = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={profile}", "--dump-dom", "file://" + os.path.abspath(html_path)],
        capture_output=True, text=True, timeout=120, check=True).stdout
    assert "<html" in out, "chromium produced no DOM"
    b = TreeBuilder()
    b.feed(out)
    return b.root


def test_report_in_chromium(branchy, chromium, tmp_path):
    html = str(tmp_path / "report.html")
    write_html(diff_inputs(branchy[0], branchy[1]), html)
    dom = chromium_dom(chromium, html, tmp_path)
    fn = dom.find_all("section", cls="function", data_name="k_branchy")
    assert len(fn) == 1 and fn[0].attrs["data-status"] == "changed"
    inserted = fn[0].find_all("tr", data_op="inserted")
    depctr = [(a, t) for a, t in objdump(branchy[1]) if t.startswith("s_waitcnt_depctr")]
    assert [(int(r.find_all("td", cls="new-addr")[0].text(), 16), r.find_all("td", cls="new")[0].text())
            for r in inserted] == depctr
    relocated = fn[0].find_all("tr", cls="relocated")
    assert len(relocated) == 2
    assert all("simm16" in r.find_all("td", cls="fields")[0].text() for r in relocated)
    assert dom.find_all("p", cls="control-flow-ok")
    assert not dom.find_all("li", cls="problem")
    # unchanged functions are named, not listed
    assert "helper" in dom.find_all("p", cls="unchanged")[0].text()
    assert not dom.find_all("section", cls="function", data_name="k_other")
    # the relocation summary table
    reloc = {th.text(): td.text() for tr in dom.find_all("table", cls="relocation")[0].find_all("tr")
             for th, td in [(tr.find_all("th")[0], tr.find_all("td")[0])]}
    assert reloc["instructions inserted"] == "1" and reloc["branches relocated"] == "2"
    assert reloc["control-flow problems"] == "0"


def test_problems_and_changed_fields_in_chromium(branchy, chromium, tmp_path):
    # the loop branch of variant 1 one dword short, and glc set on nothing: a wrong target
    listing = objdump(branchy[1])
    loop = [a for a, t in listing if t.startswith("s_cbranch_scc1")][1]
    data = bytearray(read(branchy[1]))
    off = text_file_offset(branchy[1]) + loop
    word = int.from_bytes(data[off:off + 4], "little")
    data[off:off + 4] = ((word & 0xFFFF0000) | ((word - 1) & 0xFFFF)).to_bytes(4, "little")
    broken = write(str(tmp_path / "broken.co"), bytes(data))
    html = str(tmp_path / "broken.html")
    write_html(diff_inputs(branchy[0], broken), html)
    dom = chromium_dom(chromium, html, tmp_path)
    probs = dom.find_all("li", cls="problem")
    assert len(probs) == 1 and probs[0].attrs["data-kind"] == "wrong-target"
    assert f"{loop:#x}" in probs[0].text()
    bad_rows = dom.find_all("tr", cls="problem")
    assert len(bad_rows) == 1
    assert int(bad_rows[0].find_all("td", cls="new-addr")[0].text(), 16) == loop
    assert bad_rows[0].find_all("td", cls="mark")[0].text() == "!"
    assert not dom.find_all("p", cls="control-flow-ok")


def test_text_from_inputs_is_escaped_and_nothing_is_loaded(branchy, chromium, tmp_path):
    evil = tmp_path / 'x<script>alert(1)&amp;<"y\'>.co'
    shutil.copy(branchy[1], evil)
    html = str(tmp_path / "evil.html")
    write_html(diff_inputs(branchy[0], str(evil)), html)
    dom = chromium_dom(chromium, html, tmp_path)
    assert not dom.find_all("script")
    assert dom.find_all("span", cls="new")[0].text() == f"+++ {evil}"
    assert dom.find_all("h1")[0].text().endswith(f"→ {evil}")
    # self-contained: no external resource of any kind
    for n in dom.iter():
        for k in ("src", "href", "srcset", "action", "data", "poster"):
            v = n.attrs.get(k)
            assert v is None or v.startswith("#"), (n.tag, k, v)
        assert n.tag not in ("link", "script", "iframe", "img", "object", "embed")
    text = read(html).decode()
    assert "url(" not in text and "@import" not in text and "<script" not in text


def test_screenshot_renders(branchy, chromium, tmp_path):
    html = str(tmp_path / "report.html")
    with open(html, "w", encoding="utf-8") as f:
        f.write(render_html(diff_inputs(branchy[0], branchy[2])))
    png = tmp_path / "shot.png"
    profile = tmp_path / "profile2"
    profile.mkdir()
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={profile}", "--window-size=1280,1600", f"--screenshot={png}",
                    "file://" + html], capture_output=True, timeout=120, check=True)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert (width, height) == (1280, 1600)
