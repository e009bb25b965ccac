"""A variant held back on purpose (the recipe's `held`: recipe/fields.py `held`): the grammar refuses a bad hold in one line
at its key; `trainimg outdated` shows a held item as held with its reason and source (exit 0 when only held items
are left, 1 when one is not), an OS hold ends at that OS's end of long-term support at the latest (bases.yaml),
`list --json` says each variant's OS and holds, `bump` leaves a held variant where it is; and the shipped recipes'
release watch is clean but for held items, each with its reason (the contract outside checks read).

The releases come from the real index's recorded answers (tests/localindex.py), the dates from bases.yaml.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT
from localindex import LocalIndex

from trainimg.cli.app import main
from trainimg.errors import RecipeError
from trainimg.recipe.compat import load_compat
from trainimg.recipe.fields import HOLD_KINDS
from trainimg.recipe.loading import load_recipes
from trainimg.upstream.bases import eol_items, load_bases

HELD = {"reason": "the wheelhouse here holds this one", "source": "https://pytorch.org/get-started/locally/"}


def recipe(held: str = "") -> str:
    return ("framework: pytorch\nrepository: trainimg-test/held\nmatrix:\n  - version: [\"2.13.0\"]\n"
            "    os: [debian12]\n    python: [\"3.11\"]\n" + held)


def framework_hold(**extra: str) -> str:
    body = {**HELD, **extra}
    return "    held:\n      framework:\n" + "".join(f"        {k}: {json.dumps(v)}\n" for k, v in body.items())


@pytest.fixture(scope="module")
def index() -> Iterator[LocalIndex]:
    with LocalIndex() as served:
        yield served


def folder(tmp_path: Path, text: str) -> Path:
    (tmp_path / "recipes").mkdir(exist_ok=True)
    (tmp_path / "recipes" / "held.yaml").write_text(text)
    return tmp_path / "recipes"


def outdated(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[dict], str]:
    capsys.readouterr()
    rc = main(["outdated", "--json", *args])
    out, err = capsys.readouterr()
    return rc, json.loads(out), err


# -- the grammar ----------------------------------------------------------------------------------------------------

BAD = [
    ("    held: [framework]\n", "matrix[0].held", "expected a mapping of what is held"),
    ("    held:\n      cuda: {reason: x, source: https://a.example/}\n", "matrix[0].held", "'cuda' cannot be held"),
    ("    held:\n      framework: because\n", "matrix[0].held.framework", "expected reason, source"),
    ("    held:\n      framework: {source: https://a.example/}\n", "matrix[0].held.framework.reason", "reason"),
    ("    held:\n      framework: {reason: x}\n", "matrix[0].held.framework.source", "source"),
    ("    held:\n      framework: {reason: x, source: 'not a source'}\n", "matrix[0].held.framework.source",
     "a URL or a file"),
    ("    held:\n      os: {reason: x, source: https://a.example/, until: soon}\n", "matrix[0].held.os.until",
     "is not a date"),
    ("    held:\n      os: {reason: x, source: https://a.example/, by: me}\n", "matrix[0].held.os", "unknown key 'by'"),
]


@pytest.mark.parametrize(("held", "where", "said"), BAD, ids=[b[2] for b in BAD])
def test_a_bad_hold_is_one_line_at_its_key(held: str, where: str, said: str, tmp_path: Path) -> None:
    with pytest.raises(RecipeError) as err:
        load_recipes(folder(tmp_path, recipe(held)))
    (line,) = err.value.lines()
    assert "recipes/held.yaml:" in line and where in line and said in line, line


def test_a_hold_is_a_group_field_not_an_axis(tmp_path: Path) -> None:
    (v,) = load_recipes(folder(tmp_path, recipe(framework_hold(until="2027-01-31")))).variants
    (hold,) = v.held
    assert (hold.kind, hold.reason, hold.source, hold.until) == ("framework", HELD["reason"], HELD["source"],
                                                                  datetime.date(2027, 1, 31))
    assert v.hold("framework") is hold and v.hold("os") is None and HOLD_KINDS == ("framework", "os")


# -- outdated -------------------------------------------------------------------------------------------------------


def test_a_held_release_is_shown_held_and_only_held_items_are_exit_0(index: LocalIndex, tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    recipes = folder(tmp_path, recipe())
    rc, items, err = outdated(capsys, "--recipes", str(recipes), "--index-url", index.url, "--warn-days", "0")
    fw = [i for i in items if i["kind"] == "framework"]
    assert rc == 1 and fw and fw[0]["held"] is None, items  # torch 2.13.0 is behind, nothing holds it
    folder(tmp_path, recipe(framework_hold()))
    rc, items, err = outdated(capsys, "--recipes", str(recipes), "--index-url", index.url, "--warn-days", "0")
    fw = [i for i in items if i["kind"] == "framework"]
    assert fw and fw[0]["held"] == {"kind": "framework", **HELD, "until": None}, fw
    unheld = [i for i in items if not i["held"]]
    assert rc == (1 if unheld else 0), (rc, unheld)
    assert f"{len(items)} item(s), {len(items) - len(unheld)} held by the recipes" in err, err
    capsys.readouterr()
    main(["outdated", "--recipes", str(recipes), "--index-url", index.url, "--warn-days", "0"])
    text = capsys.readouterr().out
    assert "held: framework torch 2.13.0 -> " in text and f"; {HELD['reason']} ({HELD['source']}) [" in text, text


def test_a_hold_past_its_until_is_an_item_again(index: LocalIndex, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    recipes = folder(tmp_path, recipe(framework_hold(until="2020-01-01")))
    _, items, _ = outdated(capsys, "--recipes", str(recipes), "--index-url", index.url, "--warn-days", "0")
    fw = [i for i in items if i["kind"] == "framework"]
    assert fw and fw[0]["held"] is None and "trainimg bump" in fw[0]["action"], fw


@pytest.mark.parametrize("os_name", sorted(n for n, life in load_bases().operating_systems.items()
                                            if life.lts_end and load_compat().operating_systems[n].cpu_image))
def test_an_os_hold_ends_at_the_os_lts_end_at_the_latest(os_name: str, tmp_path: Path) -> None:
    life = load_bases().operating_systems[os_name]
    assert life.lts_end is not None
    text = (f"framework: none\nname: v\nrepository: trainimg-test/v\nos: {os_name}\npython: \"3.11\"\n"
            "held:\n  os: {reason: x, source: https://a.example/, until: 2099-01-01}\n")
    recipes = folder(tmp_path, text.replace('"3.11"', json.dumps(_python(os_name))))
    variants = load_recipes(recipes).variants
    for today, held in ((life.security_end, True), (life.lts_end, True),
                        (life.lts_end + datetime.timedelta(days=1), False)):
        (item,) = eol_items(variants, today, warn_days=0)
        assert bool(item.held) == held and item.warning == (not held), (today, item)
        if held:
            assert item.held["until"] == str(life.lts_end) and item.where == ("v",)


def _python(os_name: str) -> str:
    return load_compat().operating_systems[os_name].python[0]


# -- list, bump -----------------------------------------------------------------------------------------------------


def test_list_json_says_the_os_and_the_holds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    recipes = folder(tmp_path, recipe(framework_hold()))
    capsys.readouterr()
    assert main(["--recipes", str(recipes), "list", "--json", str(tmp_path / "list.json")]) == 0
    (row,) = json.loads((tmp_path / "list.json").read_text())
    assert row["os"] == "debian12" and row["held"] == [{"kind": "framework", **HELD, "until": None}], row


def test_bump_leaves_a_held_variant_where_it_is(index: LocalIndex, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    recipes = folder(tmp_path, recipe(framework_hold()))
    assert main(["--recipes", str(recipes), "render"]) == 0
    before = {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()}
    capsys.readouterr()
    assert main(["--recipes", str(recipes), "bump", "--index-url", index.url, "--json"]) == 0
    (step,) = json.loads(capsys.readouterr().out)
    assert step["to"] is None and step["held"].startswith(HELD["reason"]) and "held by held-2.13.0-cpu-py3.11" in \
        step["held"], step
    assert {p: p.read_bytes() for p in sorted(tmp_path.rglob("*")) if p.is_file()} == before


# -- the shipped recipes: the release watch clean but for held items --------------------------------------------------


def test_the_shipped_recipes_watch_is_clean_but_for_held_items(index: LocalIndex,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    """What outside checks read: every item `outdated --json` reports on recipes/ is held, with its reason and
    source. (A base whose support ends later, and whose variants nothing holds, makes this fail on that day: the
    release watch doing its job.)"""
    rc, items, err = outdated(capsys, "--recipes", str(ROOT / "recipes"), "--index-url", index.url)
    assert rc == 0, err
    assert items, "the shipped recipes hold variants back (the demo's among them): outdated shows them"
    for item in items:
        held = item["held"]
        assert held and held["reason"] and held["source"] and held["kind"] in HOLD_KINDS, item
    assert {i["kind"] for i in items} <= {"framework", "base-eol"}
