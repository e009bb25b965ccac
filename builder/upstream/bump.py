"""`trainimg bump`: the recipes moved to what is newer upstream, through the same gate a person's edit passes.

Per version a recipe writes (a file's `version`, or one matrix group's: `Variant.origin`), the candidates are the
newest final release of each newer line, newest first. The first that the gate accepts is taken: its compat data
(derived from its wheels, as `compat add` does, when compat.yaml lacks it), then the recipes validated with it.
Then, in the checkout, one transaction per version: the recipe edited (`recipeedit`: moved, or the new version
beside the old), compat.yaml written, `images/` rendered, the old variants' locks removed (move), the new
variants locked by uv with lock's truth checks (each from its old variant's pins: only what the release needs
moves, so the lock's diff is the release's), and `render --check`'s two questions asked again (no drift, every
lock fresh). Any failure restores every file the transaction touched (`Snapshot`): nothing half-written. What is
left is one commit's worth of change; `summary` says it for the merge request.
"""

from __future__ import annotations

import datetime
import shutil
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import Version

from ..errors import CheckFailed, RecipeError, TrainimgError, UserInputError
from ..imagebuild.lockcompile import IndexUnreachable, lock_variants
from ..options.upstream import BumpOptions
from ..plan.locktruth import not_lockable
from ..plan.requirements import LOCK_MARK, lock_path, lock_states, pins
from ..recipe.compat import Compat, load_compat
from ..recipe.loading import load_recipes
from ..recipe.variant import RecipeSet, Variant
from ..render.dockerfile import check as drift_of
from ..render.dockerfile import render_all, write
from .compatfile import check_text, new_text
from .derive import derive
from .recipeedit import Occurrence, edit
from .simpleapi import Project, SimpleIndex


@dataclass
class Step:
    """One version of one recipe: what it moved to, or why not."""

    occ: Occurrence
    framework: str
    before: list[str]  # the variants it made
    target: str | None = None
    after: list[str] = field(default_factory=list)
    released: str | None = None
    source: str = ""
    refused: list[str] = field(default_factory=list)  # "VERSION: the gate's first line" per candidate refused
    cuda_moves: list[CudaMove] = field(default_factory=list)  # the CUDA lines moved with the version
    held: str | None = None  # the recipe holds these variants' framework back: its reason (recipe/fields.py `held`)
    compat_added: bool = False
    locks: list[str] = field(default_factory=list)  # "images/<v>/requirements.lock: changes"
    failed: str | None = None  # why the change was rolled back


class Snapshot:
    """The bytes of some files and of a whole folder, to put back exactly (files made since are removed)."""

    def __init__(self, files: list[Path], folder: Path) -> None:
        self.files = {p: p.read_bytes() if p.is_file() else None for p in files}
        self.folder = folder
        self.tree = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} if folder.is_dir() else {}
        self.dirs = {p for p in folder.rglob("*") if p.is_dir()} if folder.is_dir() else set()
        self.existed = folder.is_dir()

    def restore(self) -> None:
        for path, data in self.files.items():
            if data is None:
                path.unlink(missing_ok=True)
            elif not path.is_file() or path.read_bytes() != data:
                path.write_bytes(data)
        if self.folder.is_dir():
            for path in self.folder.rglob("*"):
                if path.is_file() and path not in self.tree:
                    path.unlink()
        for path, data in self.tree.items():
            if not path.is_file() or path.read_bytes() != data:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
        for path in sorted((p for p in self.folder.rglob("*") if p.is_dir() and p not in self.dirs), reverse=True):
            if not any(path.iterdir()):
                path.rmdir()
        if not self.existed and self.folder.is_dir() and not any(self.folder.iterdir()):
            self.folder.rmdir()


def occurrences(recipes: RecipeSet, patterns: tuple[str, ...]) -> dict[Occurrence, list[Variant]]:
    """The versions the chosen variants come from, each with every variant it makes."""
    chosen = {v.name for v in recipes.select(list(patterns))} if patterns else {v.name for v in recipes.variants}
    found: dict[Occurrence, list[Variant]] = {}
    for v in recipes.variants:
        if v.extends or v.framework == "none" or not v.version:
            continue
        occ = Occurrence(v.source, v.origin.get("version", "version"), v.version)
        found.setdefault(occ, []).append(v)
    return {occ: vs for occ, vs in found.items() if any(v.name in chosen for v in vs)}


@dataclass(frozen=True)
class CudaMove:
    """A CUDA line a recipe writes that the new release has no build for, moved to the line it builds instead."""

    occ: Occurrence  # where the line is written (its `version` is the line)
    new: str
    builds: tuple[str, ...]  # the release's CUDA builds, as compat data holds them

    def said(self, project: str, version: str) -> str:
        return (f"`{self.occ.path}` CUDA {self.occ.version} -> {self.new}: {project} {version} has no CUDA "
                f"{self.occ.version} build here (its builds: {', '.join(self.builds)})")


def cuda_tag(line: str) -> str:
    """``-cu132-``: a CUDA line as a variant's name says it."""
    return f"-cu{line.replace('.', '')}-"


def cuda_moves(recipes: RecipeSet, variants: list[Variant], compat: Compat, version: str) -> list[CudaMove]:
    """The CUDA lines of `variants` that `version` has no build for, each moved to the oldest newer line of the
    same major it builds (PyTorch 2.15's PyPI build is CUDA 13.2 where 2.14's was 13.0: the wheels say so). A line
    written where variants of other versions read it too, or with no such build, is left for the gate to refuse."""
    release = compat.release(variants[0].framework, version)  # type: ignore[arg-type]
    if release is None:
        return []
    moves: dict[Occurrence, CudaMove] = {}
    mine = {v.name for v in variants}
    for v in variants:
        if v.cuda is None or release.build_for(v.cuda) is not None:
            continue
        now = Version(v.cuda)
        newer = sorted(Version(line) for line in release.cuda if Version(line).major == now.major
                       and Version(line) > now)
        occ = Occurrence(v.source, v.origin.get("cuda", "cuda"), v.cuda)
        sharing = {w.name for w in recipes.variants if w.source == v.source and w.cuda == v.cuda
                   and w.origin.get("cuda", "cuda") == occ.path}
        if newer and sharing <= mine:
            moves[occ] = CudaMove(occ, f"{newer[0].major}.{newer[0].minor}", tuple(sorted(release.cuda, key=Version)))
    return list(moves.values())


def candidates(page: Project, current: str) -> list[Version]:
    """The newest final release of each line newer than `current`, newest first."""
    best: dict[tuple[int, int], Version] = {}
    for v in page.stable():
        if v > Version(current):
            best[(v.major, v.minor)] = max(v, best.get((v.major, v.minor), v))
    return sorted(best.values(), reverse=True)


class Bumper:
    """Moves recipes in one checkout: `root` holds recipes/ and images/; `compat_path` is compat.yaml."""

    def __init__(self, recipes_dir: Path, compat_path: Path, opts: BumpOptions, env: Mapping[str, str],
                 say: Callable[[str], None], today: datetime.date) -> None:
        self.recipes_dir, self.root, self.compat_path = recipes_dir, recipes_dir.resolve().parent, compat_path
        self.opts, self.env, self.say, self.today = opts, env, say, today
        self.index = SimpleIndex(opts.index_url)

    def run(self) -> list[Step]:
        compat = load_compat()
        recipes = load_recipes(self.recipes_dir, compat=compat)
        steps = []
        for occ, variants in occurrences(recipes, self.opts.variants).items():
            step = Step(occ, variants[0].framework, [v.name for v in variants])
            steps.append(step)
            held = [(v.name, hold) for v in variants if (hold := v.hold("framework")) is not None]
            if held:
                step.held = f"{held[0][1].reason} ({held[0][1].source}; held by {', '.join(n for n, _ in held)})"
                continue
            chosen = self._choose(step, compat, recipes, variants)
            if chosen is not None:
                self._apply(step, *chosen)
                compat = load_compat()
        return steps

    def _choose(self, step: Step, compat: Compat, recipes: RecipeSet, variants: list[Variant]
                ) -> tuple[str, str, Compat] | None:
        """The first candidate the gate accepts: (recipe text, compat text, compat data), or None."""
        pip_name = compat.frameworks[step.framework].pip_name  # type: ignore[index]
        page = self.index.project(pip_name)
        step.source = page.url
        path = self.root / step.occ.source
        for version in candidates(page, step.occ.version):
            text = self.compat_path.read_text(encoding="utf-8")
            data, known = compat, compat.release(step.framework, str(version))  # type: ignore[arg-type]
            if known is None or Version(known.version) < version:
                d = derive(self.index, step.framework, str(version))  # type: ignore[arg-type]
                text, _ = new_text(text, d, compat, self.today)
                data = check_text(text, d)
            recipe = edit(path, path.read_text(encoding="utf-8"), step.occ, str(version),
                          beside=self.opts.mode == "beside")
            moves = cuda_moves(recipes, variants, data, str(version))
            try:
                recipe = self._move_cuda(path, recipe, moves)
            except UserInputError as err:
                step.refused.append(f"{version}: {err.lines()[0]}")
                continue
            refusal = self._gate(step.occ.source, recipe, data)
            if refusal is None:
                step.target, step.released = str(version), str(page.released(version) or "")
                step.compat_added = data is not compat
                step.cuda_moves = moves
                return recipe, text, data
            step.refused.append(f"{version}: {refusal}")
        return None

    def _move_cuda(self, path: Path, recipe: str, moves: list[CudaMove]) -> str:
        """`recipe` with each CUDA line the release no longer builds moved to the one it does (`move` mode only:
        beside it, the old version's variants would move too)."""
        for move in moves:
            if self.opts.mode == "beside":
                raise UserInputError(f"its build for CUDA {move.occ.version} is gone (it builds {move.new}); "
                                     "--mode beside would move the old version's CUDA line too: use --mode move, "
                                     "or a matrix group of its own", where=move.occ.path)
            recipe = edit(path, recipe, move.occ, move.new, beside=False)
        return recipe

    def _gate(self, source: str, recipe: str, compat: Compat) -> str | None:
        """The first line the recipes' validation says with `recipe` in place of `source`, None when they pass."""
        with tempfile.TemporaryDirectory(prefix="trainimg-bump-") as tmp:
            copy = Path(tmp) / self.recipes_dir.resolve().name
            shutil.copytree(self.recipes_dir, copy)
            (Path(tmp) / source).write_text(recipe, encoding="utf-8")
            try:
                load_recipes(copy, compat=compat)
            except RecipeError as err:
                return err.lines()[0]
        return None

    def _apply(self, step: Step, recipe: str, compat_text: str, compat: Compat) -> None:
        """Write, render, lock and check the step's change, or put every file back."""
        recipe_path = self.root / step.occ.source
        snapshot = Snapshot([recipe_path, self.compat_path], self.root / "images")
        try:
            recipe_path.write_text(recipe, encoding="utf-8")
            if step.compat_added:
                self.compat_path.write_text(compat_text, encoding="utf-8")
                load_compat.cache_clear()
            recipes = load_recipes(self.recipes_dir, compat=compat)
            step.after = sorted(set(recipes.by_name) - set(snapshot_names(snapshot)))
            write(render_all(recipes, compat), self.root)
            self._remove_stale_locks(recipes)
            for name, old in pairs(step):  # the old variant's pins are the new lock's preference: only what
                seed = snapshot.tree.get(lock_path(self.root, old)) if old else None  # the release needs moves
                if seed is not None:
                    lock_path(self.root, name).write_bytes(seed)
            try:
                lock_variants(recipes, step.after, self.root, self.opts.lock, self.env, self.say, compat)
            except IndexUnreachable as err:  # its lock now says why, as `trainimg lock` leaves it (the others
                self.say(f"trainimg bump: {' '.join(err.lines())}")  # are locked): where it can be locked is said
            self._check(recipes, compat, step)
            step.locks = [lock_change(self.root, snapshot, name, old) for name, old in pairs(step)]
        except TrainimgError as err:
            snapshot.restore()
            load_compat.cache_clear()
            step.failed = " ".join(err.lines())
            step.after = []

    def _remove_stale_locks(self, recipes: RecipeSet) -> None:
        """The locks trainimg wrote for variants the recipes no longer make, every architecture's (an arm64 lock
        lies in images/<variant>/arm64/), and the folders that leaves empty."""
        images = self.root / "images"
        for lock in [*images.glob("*/requirements.lock"), *images.glob("*/*/requirements.lock")]:
            variant = lock.relative_to(images).parts[0]
            if variant not in recipes.by_name and lock.read_text(encoding="utf-8").startswith(LOCK_MARK):
                lock.unlink()
                for folder in (lock.parent, images / variant):
                    if folder.is_dir() and not any(folder.iterdir()):
                        folder.rmdir()

    def _check(self, recipes: RecipeSet, compat: Compat, step: Step) -> None:
        """`render --check`'s questions about the result: no drift under images/, every new lock fresh (or saying
        why it is not lockable here, as `trainimg lock` leaves a build only an unreachable index serves)."""
        drift = drift_of(render_all(recipes, compat), self.root)
        if drift:
            raise CheckFailed(f"images/ still differs from the recipes after rendering: {drift[0].path}")
        new = [recipes.by_name[n] for n in step.after]
        stale = [s for s in lock_states(recipes.with_parents(new), compat, self.root)
                 if s.state not in ("fresh", "unlockable")]
        if stale:
            raise CheckFailed(f"{stale[0].path} is {stale[0].state} after locking: {stale[0].why}")


def snapshot_names(snapshot: Snapshot) -> list[str]:
    """The variants whose Dockerfile the snapshot holds (images/<variant>/Dockerfile)."""
    return [p.parent.name for p in snapshot.tree if p.name == "Dockerfile"]


def pairs(step: Step) -> list[tuple[str, str | None]]:
    """Each new variant with the old one it replaces (same name but the version, and the CUDA line where it moved),
    None for none."""
    old = {}
    for name in step.before:
        key = name.replace(step.occ.version, "{}", 1)
        for move in step.cuda_moves:
            key = key.replace(cuda_tag(move.occ.version), cuda_tag(move.new), 1)
        old[key] = name
    return [(name, old.get(name.replace(step.target or "", "{}", 1))) for name in step.after]


def lock_change(root: Path, snapshot: Snapshot, name: str, old: str | None) -> str:
    """One line on a new lock: its size and, beside the old variant's lock, the pins that changed (or why it is not
    lockable here)."""
    text = lock_path(root, name).read_text(encoding="utf-8")
    if not_lockable(text) is not None:
        return f"images/{name}/requirements.lock: not lockable here: {not_lockable(text)}"
    new = pins(text)
    before = pins(snapshot.tree.get(lock_path(root, old), b"").decode()) if old else {}
    changed = [f"{k} {before[k]} -> {new[k]}" for k in sorted(new) if k in before and before[k] != new[k]]
    changed += [f"+{k} {new[k]}" for k in sorted(set(new) - set(before))] if before else []
    changed += [f"-{k}" for k in sorted(set(before) - set(new))]
    shown = ", ".join(changed[:12]) + (f" and {len(changed) - 12} more" if len(changed) > 12 else "")
    return f"images/{name}/requirements.lock: {len(new)} packages" + (f" ({shown})" if shown else "")


def title(steps: list[Step]) -> str:
    """The commit and merge request title: what moved."""
    moved = [f"{s.framework} {s.occ.version} -> {s.target} ({s.occ.source})" for s in steps
             if s.target and not s.failed]
    return "trainimg bump: " + ("; ".join(moved) if moved else "nothing moved")


def summary(steps: list[Step], index_url: str, today: datetime.date) -> str:
    """A merge request's description (Markdown; its first line is `title`): what moved, from what source, what
    was checked, the locks' changes, and what could not move and why."""
    moved = [s for s in steps if s.target and not s.failed]
    lines = [title(steps), "",
             f"Made by `trainimg bump` on {today} from the releases {index_url} lists.", ""]
    if moved:
        lines += ["| recipe | version | variants now | released | source |", "|---|---|---|---|---|"]
        lines += [f"| `{s.occ.source}` `{s.occ.path}` | {s.occ.version} -> {s.target} | {', '.join(s.after)} | "
                  f"{s.released or '?'} | {s.source} |" for s in moved]
        lines += ["", "Checked before this was written: the recipes validate with these versions; `images/` "
                      "renders to what is committed (`trainimg render --check`); each new lock was resolved by uv "
                      "for its variant's Python and platform and passed `trainimg lock`'s truth checks (the "
                      "framework's build, one NCCL, CUDA wheels of one line).", ""]
        lines += [f"- {line}" for s in moved for line in s.locks]
        lines += [f"- `{s.occ.source}` {m.said(s.framework, s.target or '')}" for s in moved for m in s.cuda_moves]
        added = [f"{s.framework} {s.target}" for s in moved if s.compat_added]
        if added:
            lines += ["", f"compat.yaml: derived from the wheels of {', '.join(added)} (`trainimg compat add`; each "
                          "value's source is in the comments of its entry)."]
    passed_over = [(s, r) for s in moved for r in s.refused]
    if passed_over:
        lines += ["", "Newer releases the gate refused:"]
        lines += [f"- `{s.occ.source}` {s.framework} {refusal}" for s, refusal in passed_over]
    stuck = [s for s in steps if not s.target or s.failed]
    if stuck:
        lines += ["", "Not moved:"]
        for s in stuck:
            why = ([f"held: {s.held}"] if s.held else []) + ([f"rolled back: {s.failed}"] if s.failed else [])
            why += s.refused
            lines.append(f"- `{s.occ.source}` `{s.occ.path}` {s.framework} {s.occ.version} ({', '.join(s.before)}): "
                         + ("; ".join(why) or "nothing newer on the index"))
    return "\n".join(lines) + "\n"


def step_json(s: Step) -> dict[str, object]:
    return {"recipe": s.occ.source, "key": s.occ.path, "framework": s.framework, "from": s.occ.version,
            "to": s.target if not s.failed else None, "variants_before": s.before, "variants_after": s.after,
            "released": s.released, "source": s.source, "refused": s.refused, "compat_added": s.compat_added,
            "locks": s.locks, "failed": s.failed, "held": s.held,
            "cuda_moved": [{"key": m.occ.path, "from": m.occ.version, "to": m.new} for m in s.cuda_moves]}
