"""Reference pages of what runs in and around an image: the platforms and their variables, the conformance checks
and their statuses, the image's labels and paths, the exit codes, the `TRAINIMG_*` variables.

Each from the code that decides it: the platform modules (`runtime.platforms`, one per platform), the probe's
checks (`runtime.probe.CHECKS`, in the contract's order) and the host's, the contract's constants with their
comments (`runtime.contract`), the error hierarchy (`errors`) and the CLI's handler (`cli.app.main`).
"""

from __future__ import annotations

import ast
import inspect
from types import ModuleType

from md import cell, code, header, prose, table
from sourcefacts import constants, first_paragraph, paragraphs
import envpage
from trainimg import errors
from trainimg.audit import gate as audit_gate
from trainimg.cli import app
from trainimg.conformance import imageenv, structure, suite
from trainimg.jobs.specflags import SPEC_PLATFORMS
from trainimg.runtime import contract, launch, osfixes, probe, report
from trainimg.runtime import platforms as platform_modules
from trainimg.runtime.platforms import BY_NAME, STARTS
from trainimg.runtime.platforms.starts import PLATFORM, SAYS, TORCHRUN

STARTS_SAID = {PLATFORM: "the platform (its own launcher starts every process, one replica each)",
               TORCHRUN: "torchrun (the platform's command), from its env", SAYS: "trainimg-launch, with the count "
               "the platform's env gives"}


def _variables(module: ModuleType) -> tuple[str, ...]:
    reader = getattr(module, "READER", module)
    return tuple(getattr(reader, "RECOGNISED", ()))


def _starts(name: str) -> str:
    said = STARTS.get(name)
    if said is None:
        return "trainimg-launch (`--nproc-per-node`)"
    unless = f"; for {', '.join(said.unless)}: trainimg-launch" if said.unless else ""
    return STARTS_SAID[said.how] + unless


def platforms_page() -> str:
    rows = []
    for name, module in BY_NAME.items():
        shm = getattr(module, "SHM", None)
        rows.append([f"[{code(name)}](#{name})", ", ".join(code(v) for v in _variables(module)),
                     cell(_starts(name)), code(str(module.PORT)) if module.PORT else "–",
                     "yes" if module.NO_TF_CONFIG is None else "no", "yes" if name in SPEC_PLATFORMS else "no",
                     cell(shm.default_said) if shm else "–"])
    out = [header("the platform modules (builder/runtime/platforms/), the contract and jobs/specflags.py"),
           "# Platforms and their variables\n",
           prose(first_paragraph(platform_modules)) + "\n",
           "Every platform is replayed by `trainimg test` and `trainimg run` (`--platform`); `trainimg spec` writes "
           "the job of those marked below.\n",
           table(("Platform", "Variables read", "Who starts a node's processes", "Default port", "TensorFlow",
                  "`trainimg spec`", "/dev/shm"), rows)]
    for name, module in BY_NAME.items():
        out.append(f"## {name}\n")
        out += [prose(p) + "\n" for p in paragraphs(module)[:1]]
        if module.NO_TF_CONFIG:
            out.append(f"TensorFlow: {prose(module.NO_TF_CONFIG)}\n")
        if module.NOT_EMULATED:
            out.append(f"Not emulated by `selftest`: {prose(module.NOT_EMULATED)}\n")
    out += ["## What trainimg-launch gives your program\n"] + [prose(p) + "\n" for p in paragraphs(launch)[:1]]
    return "\n".join(out)


def checks_page() -> str:
    probe_rows = [[code(name), cell(first_paragraph(probe.CHECKS[name]))] for name in contract.CHECK_NAMES]
    host = [(imageenv.NAME, imageenv.image_env_check), (osfixes.CHECK_NAME, osfixes),
            (f"{structure.CHECK_PREFIX}: CONFIG: TEST", structure.structure_checks),
            (audit_gate.CHECK_NAME, audit_gate)]
    host_rows = [[code(name), cell(first_paragraph(what))] for name, what in host]
    status_rows = [[code(s)] for s in report.STATUSES]
    return "\n".join([
        header("runtime/contract.py, runtime/probe.py, runtime/report.py and the host's checks (conformance/, audit/)"),
        "# Conformance checks and their statuses\n",
        prose(first_paragraph(suite)) + "\n",
        *[prose(p) + "\n" for p in paragraphs(suite)[1:]],
        "## Statuses\n",
        prose(first_paragraph(report)) + "\n",
        table(("Status",), status_rows),
        "## Checks inside the image (the probe), in report order\n",
        table(("Check", "What it compares"), probe_rows),
        "## Checks the host runs\n",
        table(("Check", "What it compares"), host_rows),
        f"`trainimg test --timeout` takes {contract.TEST_TIMEOUT_RANGE[0]:g} to "
        f"{contract.TEST_TIMEOUT_RANGE[1]:g} seconds (default {contract.DEFAULT_TEST_TIMEOUT:g}).\n",
    ])


CONTRACT_SECTIONS = ("labels the host writes on images", "labels the host puts on the containers, networks and "
                     "images it owns", "paths inside an image", "the advisory audit a build followed")


def contract_page() -> str:
    out = [header("builder/runtime/contract.py (the names the host and its images both read)"),
           "# Image labels and paths\n", prose(first_paragraph(contract)) + "\n"]
    facts = constants(contract)
    for title in CONTRACT_SECTIONS:
        rows = [[code(str(c.value)), code(c.name), cell(c.comment) or "–"] for c in facts
                if c.section.startswith(title.split(":")[0]) and isinstance(c.value, str)]
        heading = next(c.section for c in facts if c.section.startswith(title))
        out += [f"## {prose(heading[:1].upper() + heading[1:])}\n", table(("Value", "Name in the code", "What"), rows)]
    return "\n".join(out)


def handled(function: object) -> list[tuple[str, str]]:
    """(exception, exit code name) for each `except` of `function` that returns a name or an attribute."""
    tree = ast.parse(inspect.getsource(function))  # type: ignore[arg-type]
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ExceptHandler) or node.type is None:
            continue
        returned = [r.value for r in ast.walk(node) if isinstance(r, ast.Return) and r.value is not None]
        if returned:
            out.append((ast.unparse(node.type), ast.unparse(returned[-1])))
    return out


def exit_codes_page() -> str:
    codes = [c for c in constants(contract) if c.name.startswith("EXIT_")]
    by_name = {c.name: c.value for c in codes}
    code_rows = [[code(str(c.value)), code(c.name), cell(c.comment) or "–"] for c in codes]
    classes: list[type[errors.TrainimgError]] = [cls for cls in vars(errors).values() if isinstance(cls, type)
                                                 and issubclass(cls, errors.TrainimgError)]
    class_rows = [[code(cls.__name__), code(str(cls.exit_code)), cell(first_paragraph(cls))] for cls in classes]
    handler_rows = [[code(exc), code(str(by_name.get(name, name)))] for exc, name in handled(app.main)
                    if exc != "TrainimgError"]
    return "\n".join([
        header("runtime/contract.py (EXIT_*), builder/errors.py and cli/app.py's main"),
        "# Exit codes\n", prose(first_paragraph(app)) + "\n",
        table(("Code", "Name in the code", "Meaning"), code_rows),
        "## Errors and their codes\n", prose(first_paragraph(errors)) + "\n",
        table(("Error", "Exit code", "When"), class_rows),
        "## Everything else `trainimg` catches\n",
        "What `main` maps to an exit code besides trainimg's own errors (click's usage errors among them).\n",
        table(("Caught", "Exit code"), handler_rows),
    ])


def pages() -> dict[str, str]:
    return {"reference/platforms.md": platforms_page(), "reference/checks.md": checks_page(),
            "reference/image-contract.md": contract_page(), "reference/exit-codes.md": exit_codes_page(),
            "reference/environment.md": envpage.page()}
