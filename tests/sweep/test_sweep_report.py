"""`tilegraph sweep` end to end: the issue's example from the repository root, the report page, --report, errors."""
import base64
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

pytest.importorskip("pyarrow", reason="sweep results are Parquet: the optional dse extra (pip install -e '.[dse]')")

from tilegraph.cli import main  # noqa: E402
from tilegraph.sweep.table import read_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = """\
[sweep]
models = ["examples/lenet.tg", "examples/mlp.tg"]
accelerator = "edge-npu"

[axes]
pe_rows = [8, 16]
pe_cols = [8, 16]
scratchpad_bytes = [131072, 524288]
dataflow = ["ws", "os"]
"""


def cli(capsys, *args):
    with pytest.raises(SystemExit) as exit_info:
        main(list(map(str, args)))
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The issue's example, as written, run from the repository root on 2 workers."""
    folder = tmp_path_factory.mktemp("sweep")
    (folder / "spec.toml").write_text(EXAMPLE)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        with pytest.raises(SystemExit) as exit_info:
            main(["sweep", str(folder / "spec.toml"), "-o", str(folder / "out"), "--workers", "2"])
    assert exit_info.value.code == 0
    return folder / "out"


class Page(HTMLParser):
    """What the page holds: tags, sources and links, table rows per table id, scripts."""

    def __init__(self) -> None:
        super().__init__()
        self.images, self.links, self.rows, self.headers, self.scripts = [], [], {}, {}, 0
        self.table = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "img":
            self.images.append(attrs["src"])
        for name in ("src", "href"):
            if name in attrs and tag != "img":
                self.links.append(attrs[name])
        if tag == "table":
            self.table = attrs["id"]
            self.rows[self.table], self.headers[self.table] = 0, 0
        if tag == "tr" and self.table:
            self.rows[self.table] += 1
        if tag == "th":
            self.headers[self.table] += 1
        self.scripts += tag == "script"


def test_the_issue_example_writes_results_plots_and_a_self_contained_page(swept):
    rows, meta = read_table(swept)
    assert len(rows) == 32 and all(r["status"] == "ok" for r in rows)
    assert list(rows[0])[:7] == ["model", "point", "pe_rows", "pe_cols", "scratchpad_bytes", "dataflow", "status"]
    assert {"cycles", "latency_s", "energy_pj", "dram_compulsory_bytes", "dram_spill_reload_bytes", "utilisation",
            "area_mm2", "plan_gap", "wall_s", "error"} <= set(rows[0])
    assert "pe_rows = [8, 16]" in meta["spec"]
    assert (swept / "pareto.png").read_bytes().startswith(b"\x89PNG")
    text = (swept / "report.html").read_text()
    page = Page()
    page.feed(text)
    assert len(page.images) == 1 and base64.b64decode(page.images[0].split(",", 1)[1]).startswith(b"\x89PNG")
    assert page.links == [] and not re.search(r"https?://", text)  # nothing fetched from anywhere
    assert page.rows["results"] == 33 and page.headers["results"] >= 20  # header row + one per result
    assert 2 <= page.rows["across"] <= 17 and page.scripts == 1 and 'class="sortable"' in text


def test_report_redraws_from_the_stored_results(swept, capsys, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(swept, copy)
    (copy / "report.html").unlink()
    (copy / "pareto.png").unlink()
    code, out, err = cli(capsys, "sweep", "--report", copy)
    assert code == 0, err
    assert (copy / "report.html").read_text() == (swept / "report.html").read_text()
    assert "wrote" in out and (copy / "pareto.png").exists()


def test_a_second_run_reuses_every_point(swept, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "spec.toml").write_text(EXAMPLE)
    copy = tmp_path / "out"
    shutil.copytree(swept, copy)
    code, out, err = cli(capsys, "sweep", tmp_path / "spec.toml", "-o", copy)
    assert code == 0, err
    assert "32 rows: 0 ran, 32 reused, 0 failed" in out


@pytest.mark.parametrize("args, message", [
    (("sweep", "{spec}", "-o", "{out}"), "{spec}: [axes] pe_rows: must be an integer, got 'eight'"),
    (("sweep", "{spec}"), "give a spec and a results folder"),
    (("sweep", "--report", "{out}"), "no results.parquet here"),
    (("sweep", "{spec}", "-o", "{out}", "--report", "{out}"), "--report DIR redraws stored results"),
])
def test_errors_are_one_line_with_exit_2_and_no_traceback(capsys, tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(ROOT)
    spec = tmp_path / "bad.toml"
    spec.write_text(EXAMPLE.replace("pe_rows = [8, 16]", 'pe_rows = [8, "eight"]'))
    names = {"spec": spec, "out": tmp_path / "out"}
    code, out, err = cli(capsys, *(a.format(**names) for a in args))
    assert code == 2 and out == ""
    assert err.strip() == "error: " + err.strip().removeprefix("error: ") and "\n" not in err.strip()
    assert message.format(**names) in err and "Traceback" not in err


def test_the_page_sorts_in_headless_chromium(swept, tmp_path):
    """Click a header in a real browser (skips without playwright and a Chromium to drive)."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    browser_path = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser_path is None:
        pytest.skip("no chromium on PATH (Debian: apt-get install chromium)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto((swept / "report.html").as_uri())
        column = page.eval_on_selector_all("#results th", "hs => hs.map(h => h.textContent).indexOf('cycles')")
        cycles = f"#results tbody tr td:nth-child({column + 1})"

        def shown():
            return [float(v) for v in page.eval_on_selector_all(cycles, "tds => tds.map(td => td.dataset.v)")]
        page.click(f"#results th:nth-child({column + 1})")
        assert shown() == sorted(shown())
        page.click(f"#results th:nth-child({column + 1})")
        assert shown() == sorted(shown(), reverse=True)
        page.screenshot(path=str(tmp_path / "report.png"), full_page=False)
        browser.close()
    assert (tmp_path / "report.png").stat().st_size > 10_000
