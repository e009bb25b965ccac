"""`trainimg lock`: resolve each variant's requirements into `images/<variant>/requirements.lock` with uv.

uv resolves for a Python and platform other than the host's (`--python-version`, `--python-platform`), which pip
cannot, and writes every wheel's hashes. It reads the same sources the build does: the recipe's extra index, the
host's index settings (PIP_INDEX_URL, PIP_EXTRA_INDEX_URL) and the wheel folders (`--wheelhouse`, default
PIP_FIND_LINKS), so the hashes it records are the hashes of the wheels the build will fetch. A recipe index that
does not answer (download.pytorch.org behind a closed network) is left out, and the build it serves is then taken
from a wheel folder or not at all: the framework requirement names that build (``torch==2.14.1+cu126``), so it is
never resolved from another index; when no folder holds it, `lock` fails (exit 1) and the lock file says the
variant is not lockable here (`plan.locktruth`). Every resolved lock is read against its recipe before it is
written. An existing lock is the preference: versions move only with --upgrade.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import CheckFailed, UserInputError
from ..options import LockOptions
from ..plan.installer import UV
from ..plan.requirements import (
    LockState,
    Requirements,
    lock_header,
    lock_path,
    lock_states,
    pins,
    text_digest,
    variant_requirements,
)
from ..plan.locktruth import lock_problems, not_lockable, not_lockable_reason, not_lockable_text, state_line
from ..recipe.arches import arch_key
from ..recipe.compat import Compat, load_compat
from ..recipe.loading import RecipeSet, Variant
from .wheelhouse import Wheelhouse, check_dirs, reachable


def uv_binary() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:
        raise UserInputError("uv is not installed: `pip install trainimg` brings it") from None
    return str(find_uv_bin())


def source_args(wheelhouses: Sequence[Wheelhouse], env: Mapping[str, str]) -> list[str]:
    """uv's index and wheel-folder flags for the host's settings and the wheel folders the build serves."""
    args = ["--index-url", env["PIP_INDEX_URL"]] if env.get("PIP_INDEX_URL") else []
    for url in env.get("PIP_EXTRA_INDEX_URL", "").split():
        args += ["--extra-index-url", url] if reachable(url) else []  # pip in the build skips it too
    for w in wheelhouses:
        args += ["--extra-index-url", f"file://{w.path}/simple"] if w.is_index else ["--find-links", str(w.path)]
    for url in env.get("PIP_FIND_LINKS", "").split():  # wheel pages a builder reaches too (bake, CI runners)
        args += ["--find-links", url] if url.startswith(("http://", "https://")) else []
    return args


class IndexUnreachable(CheckFailed):
    """A recipe's index did not answer and no wheel folder holds the build it serves (exit 1, as a failed check)."""

    def __init__(self, index: str, message: str, *, where: str) -> None:
        super().__init__(message, where=where)
        self.index = index


def lock_place(variant: str, arch: str) -> str:
    """Where a lock failure happened: the variant and the architecture whose lock could not be made (a variant
    locks once per architecture it lists; amd64's may resolve where arm64's index does not answer)."""
    return f"lock {variant} ({arch})"


def mark_not_lockable(path: Path, previous: str | None, v: Variant, compat: Compat, req: Requirements,
                      index: str, arch: str) -> None:
    """Replace a missing, wrong or not-lockable lock with a file saying why it cannot be locked here; a lock that
    holds the right build (locked where the index answered) is kept."""
    if previous is not None and not_lockable(previous) is None and not lock_problems(v, compat, pins(previous),
                                                                                     arch):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(not_lockable_text(lock_header(req, (), UV), v.name, index), encoding="utf-8")


def compile_lock(req: Requirements, opts: LockOptions, env: Mapping[str, str], previous: str | None,
                 constraints: str | None = None) -> str:
    """The lock text for `req`: trainimg's header, then uv's pins with hashes and `# via` annotations."""
    used = tuple(i for i in req.indexes if reachable(i))
    with tempfile.TemporaryDirectory(prefix="trainimg-lock-") as tmp:
        folder = Path(tmp)
        (folder / "requirements.in").write_text("\n".join(req.requirements) + "\n", encoding="utf-8")
        out = folder / "requirements.txt"
        if previous is not None and not opts.upgrade:
            out.write_text(previous, encoding="utf-8")  # uv keeps an output file's pins unless told to upgrade
        cmd = [uv_binary(), "pip", "compile", "requirements.in", "-o", out.name, "--quiet", "--no-header",
               "--generate-hashes", "--python-version", req.python, "--python-platform", req.platform,
               "--index-strategy", "unsafe-best-match", *source_args(check_dirs(opts.wheelhouses), env)]
        for url in used:
            cmd += ["--extra-index-url", url]
        if constraints is not None:
            (folder / "constraints.txt").write_text(constraints, encoding="utf-8")
            cmd += ["--constraint", "constraints.txt"]
        cmd += ["--upgrade"] if opts.upgrade else [a for p in opts.upgrade_packages for a in ("--upgrade-package", p)]
        proc = subprocess.run(cmd, cwd=folder, env={**os.environ, **env}, capture_output=True, text=True)
        if proc.returncode != 0:
            unreachable = [i for i in req.indexes if i not in used]
            if unreachable and _index_build_missing(req, proc.stderr):  # never from another index: that build, or nothing
                raise IndexUnreachable(unreachable[0], f"{not_lockable_reason(req.variant, unreachable[0])} (no "
                                       "wheel folder holds it either)", where=lock_place(req.variant, req.arch))
            said = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            raise CheckFailed(f"uv could not resolve {', '.join(req.requirements)}: "
                              f"{' '.join(said[-6:])[:600]}", where=lock_place(req.variant, req.arch))
        return lock_header(req, used, UV) + out.read_text(encoding="utf-8")


def _index_build_missing(req: Requirements, said: str) -> bool:
    """Whether uv's failure is about a build only an extra index serves (a local label: `torch==2.14.1+cu126`), not
    about another pin (`six==0.0.999` from PyPI fails the same resolve and must be named as itself)."""
    labelled = [r.split(";")[0].strip() for r in req.requirements if "+" in r.split(";")[0]]
    return not labelled or any(r in said for r in labelled)


def lock_variants(recipes: RecipeSet, names: list[str], root: Path, opts: LockOptions, env: Mapping[str, str],
                  say: Callable[[str], None], compat: Compat | None = None,
                  skip: frozenset[tuple[str, str]] = frozenset()) -> list[Path]:
    """Write the lock of each chosen variant, one per architecture it lists (parents first, since a child resolves
    inside its parent's lock of the same architecture) but the (variant, architecture) pairs of `skip`; a parent
    that was not chosen is locked only when it has no lock yet."""
    compat = compat or load_compat()
    wanted = {v.name for v in recipes.select(names)}
    inputs: dict[tuple[str, str], Requirements] = {}
    written, unreachable = [], []
    for v in recipes.with_parents(recipes.select(names)):
        for arch in (a for a in v.arch if (v.name, a) not in skip):
            parent_text = lock_path(root, v.extends, arch).read_text(encoding="utf-8") if v.extends else None
            inputs[v.name, arch] = req = variant_requirements(v, compat, inputs.get((v.extends or "", arch)),
                                                              text_digest(parent_text) if parent_text else "", arch)
            path = lock_path(root, v.name, arch)
            previous = path.read_text(encoding="utf-8") if path.is_file() else None
            if v.name not in wanted and previous is not None:
                continue
            try:
                text = _locked(v, arch, req, opts, env, previous, parent_text, compat)
            except IndexUnreachable as err:  # the others are still locked; the command fails at the end
                mark_not_lockable(path, previous, v, compat, req, err.index, arch)
                unreachable.append(err)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            say(f"{path.relative_to(root)}: {len(pins(text))} packages locked"
                + (" (unchanged)" if text == previous else ""))
            written.append(path)
    if unreachable:
        raise unreachable[0]
    return written


def _locked(v: Variant, arch: str, req: Requirements, opts: LockOptions, env: Mapping[str, str],
            previous: str | None, parent_text: str | None, compat: Compat) -> str:
    """The lock text of `v` for `arch`, read against its recipe before anything is written."""
    held = "".join(f"{n}=={ver}\n" for n, ver in pins(parent_text).items()) if parent_text else None
    text = compile_lock(req, opts, env, previous, held)
    problems = lock_problems(v, compat, pins(text), arch)
    if problems:
        raise CheckFailed(f"the resolved lock contradicts {v.source}: {problems[0]}; not written",
                          where=lock_place(v.name, arch))
    return text


@dataclass(frozen=True)
class ContextLocks:
    """What `locks_into` put in a build context: the lock digest of each (variant, architecture) it holds, by
    `arches.arch_key`, and the architectures left out because their committed lock says they are not lockable
    here (one line each: what `build` and `release` say about them)."""

    digests: dict[str, str]
    left_out: tuple[str, ...] = ()


def left_out(chosen: Sequence[Variant], states: Sequence[LockState]) -> set[tuple[str, str]]:
    """The (variant, architecture) pairs a build leaves out: those whose committed lock says they are not lockable
    here, and the variants extending one of them on that architecture (`chosen`: parents first)."""
    out = {(s.variant, s.arch) for s in states if s.state == "unlockable"}
    for v in chosen:
        out |= {(v.name, a) for a in v.arch if v.extends and (v.extends, a) in out}
    return out


def locks_into(ctx: Path, recipes: RecipeSet, chosen: list[Variant], root: Path, opts: LockOptions,
               env: Mapping[str, str], say: Callable[[str], None], compat: Compat) -> ContextLocks:
    """Put each variant's lock of each architecture where its Dockerfile mounts it from (`images/<variant>/[<arch>/]`
    of the build context, for `trainimg build` and `trainimg bake` alike).

    A committed lock must be current (a stale or wrong one is refused: `trainimg lock` it); a variant with none (a
    recipes folder of your own) gets one compiled for this build, in the context only. An architecture whose
    committed lock says it is not lockable here is left out, named in `left_out`; a variant left with none is
    refused, as before architectures."""
    states = lock_states(chosen, compat, root)
    unlockable = left_out(chosen, states)
    states = [s for s in states if s.state == "unlockable" or (s.variant, s.arch) not in unlockable]
    refused = [s for s in states if s.state in ("stale", "wrong")
               or (s.state == "unlockable" and all((s.variant, a) in unlockable for a in recipes.by_name[s.variant].arch))]
    if refused:
        s = refused[0]
        raise UserInputError(state_line(s.path, s.state, s.variant, s.source, s.why))
    for s in states:
        if s.state == "fresh":
            target = ctx / s.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / s.path, target)
    missing = sorted({s.variant for s in states if s.state == "missing"})
    if missing:
        lock_variants(recipes, missing, ctx, opts, env, say, compat, frozenset(unlockable))
        say(f"locked {', '.join(missing)} for this build (no committed lock)")
    left = tuple(f"{arch_key(s.variant, s.arch)} not built: {s.path} says it is not lockable here: {s.why}"
                 for s in states if s.state == "unlockable")
    return ContextLocks({arch_key(v.name, a): text_digest(lock_path(ctx, v.name, a).read_text(encoding="utf-8"))
                         for v in chosen for a in v.arch if (v.name, a) not in unlockable}, left)
