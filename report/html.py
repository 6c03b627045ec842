"""The report page: Jinja2 templates (``templates/*.html.j2``) to one self-contained HTML file.

Models: one page, its style and script inline (``templates/report.css``,
``templates/report.js``), the gate diagrams as inline SVG: nothing is fetched
when it is opened. Every step is in the page; the script only adds stepping
(Previous / Next, a click on a step), the current edge and the filter.

Leaves out on purpose: any server, any network, any asset beside the file.
"""

from __future__ import annotations

import datetime
from functools import lru_cache
from pathlib import Path
import jinja2
from markupsafe import Markup

from envreplica.report.values import CAP, cap, safe

TEMPLATES = Path(__file__).parent / "templates"


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["cap"] = lambda text, limit=CAP: cap("" if text is None else text, limit)
    env.filters["safe_text"] = lambda text: safe(str(text))
    return env


def _asset(name: str) -> Markup:
    text = (TEMPLATES / name).read_text(encoding="utf-8")
    if "</script" in text.lower() or "</style" in text.lower():  # pragma: no cover - a broken asset
        raise ValueError(f"{name} must not close its own element")
    return Markup(text)


def render_page(title: str, traces: list, run=None) -> str:
    """The page for ``traces`` (``traces.TraceView``), and a whole run's tables when ``run`` is given."""
    template = environment().get_template("report.html.j2")
    return template.render(title=title, traces=traces, run=run, css=_asset("report.css"), js=_asset("report.js"),
                           generated=datetime.datetime.now().astimezone().isoformat(timespec="seconds"))


def write_page(out: Path, title: str, traces: list, run=None) -> Path:
    """Write the page to ``out`` (its folder made); the path."""
    text = render_page(title, traces, run)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(safe(text), encoding="utf-8")
    return out


__all__ = ["render_page", "write_page", "environment"]
