"""``snakemake --report`` of the evaluation stage, opened in a real headless browser (slow).

The evaluate rule runs for real through Snakemake on prepared parquet inputs (evaluation_helpers) placed
where the upstream rules would write them; ``--allowed-rules evaluate`` keeps Snakemake from
rebuilding them (no vLLM, no training). The report must embed every table and figure with its
caption, and Chromium must render it to a non-blank screenshot.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import yaml

from arc_pipeline.io import write_table
from arc_pipeline.schemas import REFINEMENT_SCHEMA
from tests.ci_helpers import tool_missing
from tests.evaluation import evaluation_helpers as data
from tests.workflow.conftest import REPO, Workflow

pytestmark = pytest.mark.slow

CHROMIUM = next(
    (shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome") if shutil.which(name)), None
)
REPORT_FILES = (
    "runs.html",
    "tasks.html",
    "kaggle.html",
    "errors.html",
    "errors.png",
    "passk.png",
    "training.png",
    "examples.png",
    "published.html",
)
CAPTION_WORDS = (
    "Does the RL refiner help?",
    "Unbiased pass",
    "GRPO training of the refiner",
    "Share of predictions per error type",
    "Kaggle-style scoring",
    "beside the published results",
    "up to two solved tasks",
)


def place_inputs(workflow: Workflow) -> None:
    """The evaluate rule's inputs at the paths of the rules that normally write them."""
    staged = data.write_inputs(workflow.workdir / "staged")
    # refine-prompts' outputs (no rows needed: the refinements are staged), placed in rule order so
    # that each file is newer than its inputs
    staged["prompts"] = workflow.workdir / "staged" / "prompts.parquet"
    write_table([], staged["prompts"], REFINEMENT_SCHEMA)
    targets = {
        "tasks": "arc_tasks/tasks.parquet",
        "baseline_predictions": "evaluate/baseline/predictions.parquet",
        "baseline": "evaluate/baseline/executions.parquet",
        "prompts": "evaluate/refine_prompts.parquet",
        "dropped_prompts": "evaluate/refine_prompts.dropped.parquet",
        "base_predictions": "evaluate/refine_base/predictions.parquet",
        "base": "evaluate/refine_base/executions.parquet",
        "rl_predictions": "evaluate/refine_rl/predictions.parquet",
        "rl": "evaluate/refine_rl/executions.parquet",
        "training_metrics": "train/metrics.parquet",
    }
    for key, relative in targets.items():
        destination = workflow.path(relative)
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(staged["prompts" if key == "dropped_prompts" else key], destination)


def screenshot(url: str, png: Path, profile: Path) -> None:
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
        f"--screenshot={png}",
        "--window-size=1400,1000",
        "--virtual-time-budget=5000",
        url,
    ]
    subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert png.exists() and png.stat().st_size > 0, f"chromium wrote no screenshot of {url}"


# Opens one result of the report the way a reader does: Results > Evaluation > subcategory, then the
# result's "view" (eye) button. Injected into a copy of the report; the report itself is untouched.
NAVIGATION = """<script>
function clickText(text) {
  const found = [...document.querySelectorAll('a,li,button,div,span,td')].filter(e => e.textContent.trim() === text);
  if (found.length) found[found.length - 1].click();
}
const steps = %(steps)s;
let step = 0;
function next() {
  if (step < steps.length) { clickText(steps[step]); step++; setTimeout(next, 400); return; }
  const rows = [...document.querySelectorAll('tr')].filter(e => e.textContent.includes('%(name)s'));
  const view = rows.length ? rows[rows.length - 1].querySelector('a[iconname="eye"]') : null;
  if (view) { view.click(); document.title = 'opened %(name)s'; }
}
setTimeout(next, 500);
</script>"""


def open_result(report: Path, subcategory: str, name: str, copy: Path, category: str = "Evaluation") -> Path:
    html = report.read_text()
    end = html.rindex("</body>")
    # a category without subcategories lists its results at once: clicking a missing name does nothing
    steps = json.dumps(["Results", category, subcategory])
    copy.write_text(html[:end] + NAVIGATION % {"steps": steps, "name": name} + html[end:])
    return copy


def assert_not_blank(png: Path) -> None:
    """Decode the PNG (matplotlib reads it) and check that it has real content, not one colour."""
    import matplotlib.image

    pixels = np.asarray(matplotlib.image.imread(str(png)))[..., :3]
    assert pixels.std() > 0.02, f"{png} is blank"
    colours = np.unique((pixels.reshape(-1, 3) * 255).astype(np.uint8), axis=0)
    assert len(colours) > 20, f"{png} has only {len(colours)} colours"


@pytest.fixture
def workflow(tmp_path: Path) -> Workflow:
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    (tmp_path / "work").mkdir()
    return Workflow(tmp_path / "work", config)


def test_report_embeds_tables_and_figures_and_renders(workflow: Workflow, tmp_path: Path) -> None:
    workflow.config["evaluate"].update(n_eval=data.N_EVAL, refinement_prompts=data.K, compare_with_published=True)
    workflow.write_config()
    place_inputs(workflow)
    target = workflow.target("evaluate/report/runs.md")
    workflow.snakemake("--allowed-rules", "evaluate", "--cores", "1", target)
    for name in REPORT_FILES:
        assert workflow.path(f"evaluate/report/{name}").exists(), name
    # the rule passes the rules of the default config, the (empty) count of dropped prompts and the RL adapter
    assert workflow.path("evaluate/report/published.md").read_text().count("| this run | strict |") == 3
    runs_md = workflow.path("evaluate/report/runs.md").read_text().splitlines()
    assert runs_md[3].endswith("| 0 | - |") and runs_md[4].endswith("/train/adapter |")

    report = workflow.workdir / "report.html"
    workflow.snakemake("--allowed-rules", "evaluate", "--report", str(report), target)
    html = report.read_text()
    for name in REPORT_FILES:
        assert name in html, f"{name} is not in the report"
    for words in CAPTION_WORDS:
        assert words in html, f"caption {words!r} is not in the report"
    # the figures travel inside the report as base64 PNG data
    embedded = re.findall(r"data:image/png;charset=utf8;filename=(\w+\.png);base64,([A-Za-z0-9+/=]{100})", html)
    assert {name for name, _ in embedded} >= {"errors.png", "passk.png", "training.png", "examples.png"}
    assert all(base64.b64decode(chunk[:96])[:4] == b"\x89PNG" for _, chunk in embedded)

    if CHROMIUM is None:
        tool_missing("chromium is not installed (apt-get install chromium): report written, not rendered")
    profile = tmp_path / "chromium-profile"
    landing = tmp_path / "report.png"
    screenshot(report.as_uri(), landing, profile)
    assert_not_blank(landing)
    for subcategory, name in (("Tables", "runs.html"), ("Figures", "passk.png"), ("Figures", "examples.png")):
        page = open_result(report, subcategory, name, tmp_path / f"report-{name}.html")
        png = tmp_path / f"report-{name}.png"
        screenshot(page.as_uri(), png, profile)
        assert_not_blank(png)
        assert png.read_bytes() != landing.read_bytes(), f"opening {name} in the report changed nothing"


def test_report_of_finished_parts_before_evaluation(workflow: Workflow, tmp_path: Path) -> None:
    """A researcher builds the report while the evaluation still runs: with the finished BARC parts as
    targets it holds their metric tables; the whole workflow's report refuses, naming the missing file."""
    staged = data.write_inputs(workflow.workdir / "staged")
    for source, relative in (
        ("baseline_predictions", "inference/barc/part1.parquet"),
        ("tasks", "barc_split/part1.parquet"),
    ):
        workflow.path(relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(staged[source], workflow.path(relative))
    target = workflow.target("execute/barc/part1.metrics.html")
    workflow.snakemake("--allowed-rules", "execute", "--cores", "1", target)

    whole = workflow.snakemake("--report", str(workflow.workdir / "whole.html"), check=False)
    assert whole.returncode != 0 and "marked for report but does not exist" in whole.stdout + whole.stderr

    report = workflow.workdir / "parts.html"
    workflow.snakemake("--report", str(report), target)  # the README's command for finished parts
    html = report.read_text()
    assert "part1.metrics.html" in html and "first-turn predictions on BARC part 1" in html
    assert "evaluate/report" not in html

    if CHROMIUM is None:
        tool_missing("chromium is not installed (apt-get install chromium): report written, not rendered")
    page = open_result(report, "Other", "part1.metrics.html", tmp_path / "report-part1.html", category="BARC inference")
    png = tmp_path / "report-part1.metrics.png"
    screenshot(page.as_uri(), png, tmp_path / "chromium-profile")
    assert_not_blank(png)
