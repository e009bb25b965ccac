"""Reference pages of the recipes: their fields (`recipe.expand.FIELDS`, what an extending variant may set) and
the compatibility matrix they are validated against (`recipe.compat.load_compat`, builder/recipe/data/compat.yaml).

Why from the loaded data and not the YAML text: the typed models are what `validate` checks a recipe with, so the
tables show exactly what the checks read (a version line, a PEP 440 range, the tested pair), with each entry's
cited source.
"""

from __future__ import annotations

from md import cell, code, header, prose, table
from sourcefacts import first_paragraph
from trainimg.recipe import compat as compat_module, expand, loading
from trainimg.recipe.compat import Compat, load_compat

CHILD_KEYS = loading._CHILD_KEYS  # what an extending variant may set (the loader refuses the rest)


def recipe_page() -> str:
    rows = [[code(name), cell(what), "group field" if name in expand.GROUP_FIELDS else "yes",
             "yes" if name in CHILD_KEYS else "no"] for name, what in expand.FIELDS.items()]
    file_keys = sorted(expand._FILE_KEYS - set(expand.FIELDS))
    return "\n".join([
        header("builder/recipe/expand.py (FIELDS, GROUP_FIELDS) and builder/recipe/loading.py"),
        "# Recipe fields\n",
        prose(first_paragraph(expand)) + "\n",
        prose(f"A recipe file is a YAML mapping of the fields below, shared by its variants, plus "
              f"{' and '.join(f'`{k}`' for k in file_keys)}: each `matrix` group (a list of them, or one) expands "
              "into the product of its axes, each axis a field and its list of values; each `exclude` entry "
              "removes the combinations whose fields all equal its values. A variant that `extends` another sets "
              "only the fields marked below; the rest it inherits.") + "\n",
        table(("Field", "What it holds", "Matrix axis", "Set by an extending variant"), rows),
        "## A shipped recipe\n",
        'The CPU and GPU PyTorch variants of this repository (`recipes/pytorch.yaml`):\n',
        '```yaml\n--8<-- "recipes/pytorch.yaml"\n```\n',
    ])


def _source(text: str) -> str:
    return cell(text)


def compat_page(compat: Compat) -> str:
    out = [header("builder/recipe/data/compat.yaml, loaded as `validate` loads it (builder/recipe/compat.py)"),
           "# Compatibility matrix\n", prose(first_paragraph(compat_module)) + "\n"]
    for name, fw in compat.frameworks.items():
        out.append(f"## {name}\n\nInstalled as {code(fw.pip_name)}.\n")
        rows = []
        for rel in fw.releases:
            builds = "; ".join(f"{line}: cuDNN {code(w.cudnn)}, NCCL {code(w.nccl)}, base CUDA {code(w.cuda_lines)}"
                               + (f", tested cuDNN {w.tested.cudnn or '–'} NCCL {w.tested.nccl or '–'}"
                                  if w.tested else "")
                               for line, w in rel.cuda.items())
            rows.append([code(rel.version), str(rel.released), code(rel.python), "yes" if rel.cpu else "no",
                         builds or "–", _source(rel.source)])
        out.append(table(("Release", "Released", "Python", "CPU build", "CUDA builds", "Source"), rows))
    out.append("## Operating systems\n")
    out.append(table(("OS", "CPU base image", "Architectures", "Python", "glibc", "Source"),
                     [[code(k), code(o.cpu_image) if o.cpu_image else "–", ", ".join(o.arches), ", ".join(o.python),
                       o.glibc, _source(o.source)] for k, o in compat.operating_systems.items()]))
    out.append("## CUDA base images (nvidia/cuda)\n")
    out.append(table(("CUDA line", "Image version", "OS", "Architectures", "cuDNN", "NCCL", "Source"),
                     [[code(k), code(c.image_version), ", ".join(c.os), ", ".join(c.arches), c.cudnn or "–",
                       c.nccl or "–", _source(c.source)] for k, c in compat.cuda.items()]))
    out.append("## GPU architectures of each CUDA build\n")
    out.append(table(("Framework", "Releases", "CUDA builds", "CPU", "Kernels", "Source"),
                     [[a.framework, code(a.versions), code(a.cuda), a.arch, ", ".join(a.archs), _source(a.source)]
                      for a in compat.gpu_archs]))
    out.append("## CPU architectures besides amd64\n")
    out.append(table(("Framework", "Releases", "CPU", "CPU build", "CUDA builds", "What exists", "Source"),
                     [[a.framework, code(a.versions), a.arch, "yes" if a.cpu else "no",
                       code(a.cuda) if a.cuda else "none", cell(a.note), _source(a.source)]
                      for a in compat.architectures]))
    out.append("## NCCL and hypertune\n")
    out.append(f"NCCL at least {code(compat.nccl.minimum)} (source: {_source(compat.nccl.source)}); "
               f"cloudml-hypertune {', '.join(code(v) for v in compat.hypertune)}.\n")
    return "\n".join(out)


def pages() -> dict[str, str]:
    return {"reference/recipe.md": recipe_page(), "reference/compatibility.md": compat_page(load_compat())}
