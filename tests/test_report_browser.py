"""The report in a real browser: Debian's headless Chromium driven by Selenium.

What a reviewer does with the page: steps through a trace (Next / Previous,
a click on a step), sees the step's diff and the gate edge it takes
highlighted, and filters the tables to one key. Run on the saved F1
counterexample and on a lockstep divergence produced here
(``envreplica conformance`` against a seed-variant adapter, held to the fixed
model, ``--report``).

Needs ``/usr/bin/chromium`` and ``/usr/bin/chromedriver`` (``apt-get install
-y chromium chromium-driver``; other paths through ``ENVREPLICA_CHROMIUM`` /
``ENVREPLICA_CHROMEDRIVER``) and ``selenium`` (the ``test`` extra); the
driver is given by path, so Selenium Manager never downloads anything.
Without them the tests skip, except when ``CI`` is set: CI installs them,
so there they fail.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
F1 = ROOT / "docs" / "traces" / "F1-seed-cloud.itf.json"
#: Debian's paths; another machine may name its own (still never downloaded).
CHROMIUM = os.environ.get("ENVREPLICA_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("ENVREPLICA_CHROMEDRIVER", "/usr/bin/chromedriver")


def _missing() -> list[str]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401  (only whether it is there)
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    return missing


@pytest.fixture(scope="module")
def browser():
    missing = _missing()
    if missing:
        reason = (f"the browser tests need {', '.join(missing)} "
                  f"(apt-get install -y chromium chromium-driver)")
        if os.environ.get("CI"):
            pytest.fail(f"CI installs them, so this is a failure: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1400,1600", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _report(argv: list[str], out: Path, expect: int = 0) -> Path:
    done = subprocess.run([sys.executable, "-m", "envreplica.cli.main", *argv], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert done.returncode == expect, done.stdout[-3000:] + done.stderr[-3000:]
    assert out.is_file(), done.stdout[-3000:]
    return out


@pytest.fixture(scope="module")
def f1_page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "f1.html"
    return _report(["report", str(F1), "-o", str(out)], out)


@pytest.fixture(scope="module")
def divergence_page(tmp_path_factory) -> Path:
    """A seed-variant adapter held to the fixed model: it parts; ``--report`` writes the page."""
    out_dir = tmp_path_factory.mktemp("conformance")
    adapter = f"{sys.executable} -m envreplica.conformance.adapter --impl sqlite --test-key --variant seed"
    out = out_dir / "r.html"
    return _report(["conformance", "--adapter", adapter, "--variant", "fixed", "--max-examples", "200",
                    "--out", str(out_dir), "--report", str(out)], out, expect=1)


def _open(browser, page: Path) -> None:
    browser.get(page.resolve().as_uri())
    assert "js" in browser.find_element("tag name", "body").get_attribute("class").split()


def _css(browser, selector: str):
    return browser.find_elements("css selector", selector)


def _current_edges(browser) -> list[str]:
    return [g.get_attribute("data-edge") for g in _css(browser, "#diagram svg g.edge.current")]


def _step(browser, n: int):
    row = browser.find_element("css selector", f'#steps tr.step[data-step="{n}"]')
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", row)
    row.find_element("css selector", "td.action").click()
    return row


def _no_script_errors(browser) -> None:
    severe = [e for e in browser.get_log("browser") if e.get("level") == "SEVERE"]
    assert not severe, severe


# ---------------------------------------------------------------------------
# The F1 counterexample
# ---------------------------------------------------------------------------


def test_stepping_shows_each_steps_diff_and_its_gate_edge(browser, f1_page):
    _open(browser, f1_page)
    # The page opens at the step where the invariant breaks (#9), scrolled into view.
    breaking = browser.find_element("css selector", '#steps tr.step[data-step="9"]')
    assert {"current", "breaks"} <= set(breaking.get_attribute("class").split())
    assert browser.find_element("css selector", "#trace .current-step").text == "9"
    assert browser.execute_script(
        "var r = arguments[0].getBoundingClientRect(); return r.top >= 0 && r.bottom <= window.innerHeight;",
        breaking)
    assert browser.find_element("id", "diff-9").is_displayed()
    assert not browser.find_element("id", "diff-0").is_displayed()  # one step's diff at a time

    first = _step(browser, 0)
    assert "current" in first.get_attribute("class").split()
    assert browser.find_element("id", "diff-0").is_displayed()
    assert not browser.find_element("id", "diff-9").is_displayed()

    next_button = browser.find_element("css selector", "#trace .stepper .next")
    for _ in range(3):
        next_button.click()
    assert browser.find_element("css selector", "#trace .current-step").text == "3"
    assert _current_edges(browser) == ["closed_staging->open"]  # the commit opens the gate
    assert [n.get_attribute("data-node") for n in _css(browser, "#diagram svg g.node.current")] == ["open"]
    assert browser.find_element("id", "diff-3").is_displayed()

    next_button.click()  # #4: a cloud change moves no gate
    assert _current_edges(browser) == []
    assert "no table changed" in browser.find_element("id", "diff-4").text
    browser.find_element("css selector", "#trace .stepper .prev").click()
    assert _current_edges(browser) == ["closed_staging->open"]

    _step(browser, 6)  # the second begin: open -> closed.staging
    assert _current_edges(browser) == ["open->closed_staging"]

    row = _step(browser, 9)  # the resumed read installs the stale value: F1
    assert "current" in row.get_attribute("class").split()
    assert "materializeLive" in row.find_element("css selector", "td.seed").text
    diff = browser.find_element("id", "diff-9")
    assert diff.is_displayed() and not browser.find_element("id", "diff-6").is_displayed()
    added = diff.find_elements("css selector", 'table[data-table="values"] tr.row.added')
    assert len(added) == 1 and added[0].is_displayed()
    assert "p1 / A" in added[0].text and '"v"' in added[0].text
    changed = diff.find_element("css selector", 'table[data-table="records"] tr.row.changed span.field.changed')
    assert "mat.kind" in changed.text and "installed" in changed.text
    _no_script_errors(browser)


def test_filter_hides_rows_of_other_projects_and_keys(browser, f1_page):
    _open(browser, f1_page)
    every = browser.find_element("css selector", "#trace .stepper .show-all-diffs")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", every)  # the page opened at #9
    every.click()  # every step's diff
    rows = _css(browser, "#diff tr.row:not(.global)")
    assert all(r.is_displayed() for r in rows)
    other = [r for r in rows if "A" not in json.loads(r.get_attribute("data-tokens"))]
    mine = [r for r in rows if "A" in json.loads(r.get_attribute("data-tokens"))]
    assert other and mine  # e.g. the staged project a1 / p1, and the record p1 / A

    box = browser.find_element("id", "filter")
    box.send_keys("A")
    assert all(not r.is_displayed() for r in other)
    assert all(r.is_displayed() for r in mine)
    assert all(r.is_displayed() for r in _css(browser, "#diff tr.row.global"))  # the authority row stays
    assert "hidden" in browser.find_element("id", "filter-status").text
    dimmed = _css(browser, "#steps tr.step.dim")
    assert dimmed and all("A" not in json.loads(r.get_attribute("data-tokens")) for r in dimmed)

    box.clear()
    box.send_keys(" ")  # an input event with an empty filter: everything back
    assert all(r.is_displayed() for r in other)
    assert not _css(browser, "#steps tr.step.dim")
    _no_script_errors(browser)


# ---------------------------------------------------------------------------
# A lockstep divergence
# ---------------------------------------------------------------------------


def test_divergence_shows_model_and_implementation_side_by_side(browser, divergence_page):
    _open(browser, divergence_page)
    section = browser.find_element("css selector", "section.divergence")
    assert section.is_displayed()
    parting = section.get_attribute("data-step")
    model = section.find_elements("css selector", "td.model.differs")
    impl = section.find_elements("css selector", "td.impl.differs")
    if model or impl:  # the responses part: the differing field, each side's value
        assert model and impl and len(model) == len(impl)
        assert all(m.is_displayed() for m in model + impl)
        assert [m.text for m in model] != [i.text for i in impl]
    else:  # the responses agree and the tables part (which the draws give depends on the run): a row that differs
        rows = section.find_elements("css selector", "tr.row.differs")
        assert rows and all(r.is_displayed() for r in rows), "neither the responses nor a table row differ"
        assert section.find_elements("css selector", ".field.differs")

    row = browser.find_element("css selector", "#steps tr.step.parting")
    assert row.get_attribute("data-step") == parting
    assert {"current", "breaks"} <= set(row.get_attribute("class").split())  # the page opens where they part
    assert browser.find_element("id", f"diff-{parting}").is_displayed()
    _step(browser, 1)
    assert not browser.find_element("id", f"diff-{parting}").is_displayed()
    _step(browser, int(parting))
    assert browser.find_element("id", f"diff-{parting}").is_displayed()

    edged = [r for r in _css(browser, "#steps tr.step") if r.get_attribute("data-edge")]
    assert edged, "a lockstep trace begins an attempt: at least one gate edge"
    _step(browser, int(edged[0].get_attribute("data-step")))
    assert _current_edges(browser) == [edged[0].get_attribute("data-edge")]
    assert edged[0].find_element("css selector", "td.seed").text.strip()  # the seed function it runs
    _no_script_errors(browser)
