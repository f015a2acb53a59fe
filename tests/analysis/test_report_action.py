"""The report says what to set, in tables a person can read, with the numbers the demo prints.

One report of a simulated sweep (AllReduce and AllGather on 2, 4 and 8 nodes) with a live
campaign ingested apart: its headline leads with the ranges where an arm beats NCCL's choice
and the export files it wrote; the ``export`` commands it names write those files again; the
demo's summary says the headline's sentences; stock comes before AUTO in the live verdicts;
every Markdown table it (and ``analyze live``) writes stays within 120 characters without a
``nan``; p-values carry two significant digits.
"""

from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from ncclbot_sweep.analysis.tables import MARKDOWN_WIDTH, MISSING, MISSING_NOTE, p_value, to_markdown
from ncclbot_sweep.cli import main
from ncclbot_sweep.demo import DemoResult
from ncclbot_sweep.names import Arm, log_algorithm_name

from .live_synth import FABRIC, SIZES, write_live_dataset
from .simpools import write_sim_dataset


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(report folder, sweep dataset, live dataset): ``analyze report`` of a sweep with a live dataset beside it."""
    root = tmp_path_factory.mktemp("action")
    write_live_dataset(root / "live")
    write_sim_dataset(root / "sweep", FABRIC, collectives=("AllReduce", "AllGather"), nodes=(2, 4, 8), sizes=SIZES,
                      iters=60)
    args = ["analyze", "report", "-d", str(root / "sweep"), "--live-dataset", str(root / "live"), "-o",
            str(root / "report"), "--seeds", "2", "--horizon", "40", "--policies", "AUTO,UCB1,Random"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return root / "report", root / "sweep", root / "live"


def _box(report: Path) -> str:
    """The headline box's text, tags dropped and whitespace collapsed."""
    page = (report / "index.html").read_text()
    box = page[page.index('id="headline"'):page.index("</section>")]
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", box)).split())


def _headline(report: Path) -> dict:
    return json.loads((report / "results.json").read_text())["headline"]


def _rules(path: Path) -> list[list[str]]:
    return [line.split(",") for line in path.read_text().splitlines() if line and not line.startswith("#")]


def test_the_headline_leads_with_what_to_set_and_the_files_it_wrote(built):
    report, sweep, _live = built
    box = _box(report)
    order = [box.index(heading) for heading in ("What to set", "AUTO over every context",
                                                "Is live learning worth running?")]
    assert order == sorted(order)
    (deployment,) = _headline(report)["action"]["deployments"]
    tuner, static = Path(deployment["nccl_tuner"]), Path(deployment["static"])
    assert tuner == (report / "export" / FABRIC / "nccl_tuner.conf").resolve() and tuner.is_file()
    assert static == (report / "export" / FABRIC / "static.csv").resolve() and static.is_file()
    for text in (f"export NCCL_TUNER_CONFIG_FILE={tuner}", "export NCCLBOT_POLICY=static",
                 f"export NCCLBOT_STATIC_TABLE={static}",
                 f"ncclbot-sweep export nccl-tuner -d {sweep.resolve()} -o {tuner}",
                 f"ncclbot-sweep export static -d {sweep.resolve()} -o {static}"):
        assert text in box, text
    # Each range of the page is one rule of the tuner file, and the audit agrees with it context by context.
    ranges = pd.read_csv(report / "tables" / "what_to_set.csv")
    rules = _rules(tuner)
    assert len(ranges) == len(rules) == deployment["rules"] > 0
    audit = pd.read_csv(report / "tables" / "audit_contexts.csv")
    for row, rule in zip(ranges.itertuples(index=False), rules):
        assert rule[:2] == [row.collective.lower(), str(row.min_bytes)] and rule[6:] == [str(row.nodes), str(row.ranks)]
        arm = Arm.parse(row.arm)
        assert rule[3:5] == [log_algorithm_name(arm.algorithm).lower(), arm.protocol.lower()]
        inside = audit[(audit["collective"] == row.collective) & (audit["nodes"] == row.nodes)
                       & audit["size_bytes"].between(row.min_bytes, row.max_bytes)]
        assert len(inside) == row.contexts and (inside["best_arm"] == row.arm).all()
        assert set(inside["auto_arm"]) == set(row.auto_arm.split(", "))
        assert 100 * inside["trlt_selection"].min() == pytest.approx(row.loss_min_pct) and row.loss_min_pct >= 5
        assert f"{row.sizes} {row.arm} {row.auto_arm}" in box


def test_the_export_commands_the_headline_names_write_the_same_files(built, tmp_path):
    report, _sweep, _live = built
    (deployment,) = _headline(report)["action"]["deployments"]
    for command, written in zip(deployment["commands"], (deployment["nccl_tuner"], deployment["static"])):
        words = shlex.split(command)
        assert words[:2] == ["ncclbot-sweep", "export"] and words[words.index("-o") + 1] == written
        again = tmp_path / Path(written).name
        words[words.index("-o") + 1] = str(again)
        result = CliRunner().invoke(main, words[1:])
        assert result.exit_code == 0, result.output
        assert again.read_text() == Path(written).read_text()


def test_the_demo_says_the_headline_sentences_with_the_same_numbers(built):
    report, sweep, live = built
    lines = DemoResult(campaign=sweep, dataset=sweep, report=report / "index.html", live_campaign=live,
                       live_dataset=live, live_analysis=report / "live", workload_campaign=live,
                       workload_dataset=live).summary()
    box = _box(report)
    said = [line.removeprefix("demo:   ") for line in lines[1:]
            if not line.startswith(("demo:   report ", "demo:   live campaign analysis ", "demo:   workload comparison "))]
    assert len(said) >= 4
    for line in said:
        assert line in box, line
    auto = pd.read_csv(report / "tables" / "audit_summary.csv").set_index("pricing").loc["selection"]
    (auto_line,) = [line for line in said if line.startswith("AUTO picks a wrong arm")]
    assert f"mean {auto['mean_pct']:.1f}%, p99 {auto['p99_pct']:.1f}%; {int(auto['above_0.1'])} contexts" in auto_line
    numbers = _headline(report)
    assert numbers["auto"]["mean_pct"] == pytest.approx(auto["mean_pct"])
    learner = pd.read_csv(report / "tables" / "summary.csv").set_index("policy")
    assert numbers["learner"]["auto_mean_pct"] == pytest.approx(learner.loc["AUTO", "realized_mean_pct"])
    assert f"AUTO's {learner.loc['AUTO', 'realized_mean_pct']:.2f}%" in box


def test_the_live_verdict_says_stock_before_auto(built):
    report, _sweep, _live = built
    (scenario,) = _headline(report)["live"]
    line = f"{scenario['title']}: {' '.join(scenario['short'])}"
    assert line in _box(report)
    assert "than stock" in scenario["short"][0] and "AUTO" not in scenario["short"][0]
    assert "AUTO" in scenario["short"][1]
    learning = _box(report).split("Is live learning worth running?")[1]
    assert re.match(r" (Yes|Not yet|No|Worth a live trial|No evidence)\b", learning), learning[:80]


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("|")]


def test_every_markdown_table_stays_within_120_characters_without_nan(built, tmp_path):
    report, sweep, live = built
    copies = sorted((report / "tables").glob("*.md"))
    assert len(copies) >= 12
    noted = 0
    for path in copies:
        text = path.read_text()
        assert _table_lines(text), path.name
        assert max(len(line) for line in text.splitlines()) <= MARKDOWN_WIDTH, path.name
        assert not re.search(r"\bnan\b", text, re.I), path.name
        cells = [cell.strip() for line in _table_lines(text) for cell in line.strip("|").split("|")]
        if MISSING in cells:
            assert MISSING_NOTE in text, path.name
            noted += 1
    assert noted, "no table here has a missing value: the dash and its note are not exercised"
    result = CliRunner().invoke(main, ["analyze", "live", "-d", str(live), "-d", str(sweep), "-o", str(tmp_path)])
    assert result.exit_code == 0, result.output
    printed = _table_lines(result.output)
    assert len(printed) >= 10 and max(map(len, printed)) <= MARKDOWN_WIDTH
    assert not re.search(r"\bnan\b", "\n".join(printed), re.I)


def test_html_tables_show_a_dash_for_missing_values_and_p_values_with_two_digits(built):
    report, _sweep, _live = built
    page = (report / "index.html").read_text()
    assert not re.search(r"<td>\s*nan\s*</td>", page, re.I)
    assert f"<td>{MISSING}</td>" in page and MISSING_NOTE in page
    tests = pd.read_csv(report / "tables" / "tests.csv").iloc[0]
    table = next(t for t in re.findall(r"<table.*?</table>", page, re.S) if "p Holm, mean" in t)
    headers = re.findall(r"<th>(.*?)</th>", table)
    cells = re.findall(r"<td>(.*?)</td>", table)[:len(headers)]
    shown = dict(zip(headers, cells))
    for column, header in (("p_signflip_mean", "p sign-flip, mean"), ("p_holm_mean", "p Holm, mean"),
                           ("p_mcnemar", "p McNemar (descriptive)")):
        assert shown[header] == p_value(tests[column]), (header, shown[header], tests[column])
        assert len(re.sub(r"e-?\d+$|^0\.0*|\.", "", shown[header])) == 2, shown[header]


def test_a_table_too_wide_for_parts_is_written_long_and_keeps_every_word():
    note = "word " * 60
    frame = pd.DataFrame({"flag": ["a", "b"], "contexts": [1, None], "note": [note.strip(), "short"]})
    text = to_markdown(frame)
    assert max(len(line) for line in text.splitlines()) <= MARKDOWN_WIDTH
    assert " ".join(text.split()).count("word") == 60 and "short" in text
    assert "| a    | contexts |" in text and MISSING_NOTE in text
    wide = pd.DataFrame({f"column_{i}": [1.23456, float("nan")] for i in range(30)}).assign(policy=["UCB1", "AUTO"])
    parts = to_markdown(wide[["policy", *wide.columns[:-1]]])
    assert parts.count("| policy |") >= 3 and max(len(line) for line in parts.splitlines()) <= MARKDOWN_WIDTH
    assert "1.23" in parts and "1.23456" not in parts and "nan" not in parts


def _colours(fig) -> dict[str, str]:
    """Legend label -> colour (hex) of every line and scatter of ``fig`` that is labelled."""
    from matplotlib.colors import to_hex

    found = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            found.setdefault(line.get_label(), to_hex(line.get_color()))
        for points in ax.collections:
            colours = points.get_facecolor()
            if len(colours) and not points.get_label().startswith("_"):
                found.setdefault(points.get_label(), to_hex(colours[0], keep_alpha=False))
    return found


def test_every_figure_draws_an_arm_in_the_one_palette(built, tmp_path, kept_figures):
    from ncclbot_sweep.analysis import figures
    from ncclbot_sweep.analysis.audit import audit_auto
    from ncclbot_sweep.analysis.inputs import load_problem
    from ncclbot_sweep.analysis.live import analyze_live
    from ncclbot_sweep.analysis.live import figures as live_figures
    from ncclbot_sweep.analysis.report import dynamics

    # One definition: the figure modules draw arms with the same function over the same table.
    assert dynamics.arm_colour is figures.arm_colour is live_figures.arm_colour
    _report, sweep, live = built
    problem = load_problem(sweep)
    curves = figures.arm_curves(problem.pools, audit_auto(problem))
    figures.plot_arm_curves(curves[(curves["collective"] == "AllReduce") & (curves["nodes"] == 2)], tmp_path)
    figures.plot_cost_vs_measured(figures.cost_vs_measured(problem.pools, problem.predicted), tmp_path)
    dynamics.plot_transients(dynamics.transient_curves(problem.pools), tmp_path)
    live_figures.plot_timeline(analyze_live([live, sweep]).tables["timeline"], tmp_path / "timeline.png", title="t",
                               synthetic=True)
    drawn = [{label: colour for label, colour in _colours(fig).items() if label in figures.ARM_COLOURS}
             for fig in kept_figures]
    assert len(drawn) >= 4 and all(drawn), "a figure drew no arm"
    for arms in drawn:
        assert arms == {arm: figures.ARM_COLOURS[arm] for arm in arms}
    seen = [arm for arms in drawn for arm in arms]
    assert len(set(figures.ARM_COLOURS[arm] for arm in set(seen))) == len(set(seen)), "two arms share a colour"
    # Some arms appear in every kind of figure here (arm curves, cost model, transients, live timeline).
    assert set.intersection(*(set(arms) for arms in drawn)), drawn
