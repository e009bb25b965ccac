"""The grammar's figures: how fast the one image-reference grammar (builder/recipe/grammar.py) refuses hostile input.

A `--registry` value is user input, and a regular expression that backtracks turns one bad character at the end of
a long valid-looking name into seconds or years of CPU. tests/test_grammar.py checks that every hostile value is
refused (exit 2, naming `--registry`) and that none is accepted; how fast is measured here, where a loaded machine
is noise to report, not a failed test:

* `registry_refusal_ms`: `RegistryTarget.parse` of each of 1000 hostile values (`hostile_values`: near misses
  that backtrack, unicode look-alikes, random compositions each with a fatal flaw), each value's best of SAMPLES
  tries; the figure is the slowest value's best, in ms;
* `reference_near_miss_ms`: the reference and repository patterns on 100,000-character near misses, best of
  SAMPLES; the slowest, in ms (linear: about a millisecond; the backtracking spelling never ends).

No engine: `python3 benchmarks/bench.py --grammar` measures them alone.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from harness import Harness, log, step

SAMPLES = 5
_SEPARATORS = ["-", "_", ".", "__", "--", "._", "_.", "/", "//", ":", "::", "@", " ", "\t", "\n", "\x00", "\\"]
UNICODE = ["é", "ａ", "٣", "²", "５", "ß", "\u200b", "\u0301", "İ", "😀", "\u2028", "ǅ"]
#: Near misses of the reference grammar itself, 100,000 characters each.
LONG_NEAR_MISSES = ("a" * 100_000 + "!", "a-" * 50_000 + "!", "a." * 50_000 + "/!", "a/" * 50_000 + "A")


def _near_misses(rng: random.Random) -> list[str]:
    """Valid-looking targets with one bad character at the end or inside: the shape that backtracks."""
    out = []
    for n in (1, 5, 26, 64, 200, 1000, 5000):
        run = "a" * n
        out += [f"localhost:5000/{run}!", f"localhost:5000/{'a-' * n}!", f"localhost:5000/{'a_' * n}-",
                f"localhost:5000/{'a.' * n}", f"localhost:5000/{run}/", f"{'a.' * n}com:5000/x!",
                f"{'a-' * n}:5000", f"registry.example.com/{'a' * n}{rng.choice('!A$%^&*()+=')}",
                f"localhost:5000/{'a__' * n}_b", f"localhost:{'9' * (n + 5)}"]
    return out


def _generated(rng: random.Random, count: int) -> list[str]:
    """Random compositions of valid pieces and separators, each with a flaw that is fatal wherever it lands."""
    pieces = ["localhost", "localhost:5000", "registry.example.com", "a", "team", "ml", "127.0.0.1:5000"]
    flaws = ["!", "..", "//", "::", "https://", " x ", "$(x)", "\x00", "@", *UNICODE]  # fatal anywhere
    out = []
    while len(out) < count:
        parts = [rng.choice(pieces) for _ in range(rng.randint(1, 4))]
        joined = rng.choice(_SEPARATORS).join(parts)
        flaw = rng.choice(flaws)
        at = rng.randint(0, len(joined))
        out.append(joined[:at] + flaw * rng.randint(1, 40) + joined[at:] + rng.choice(["", "!", "/", "-"]))
    return out


def hostile_values() -> list[str]:
    """1000 `--registry` values, none valid, seeded: the test's and the figure's input."""
    rng = random.Random(13)
    values = _near_misses(rng)
    values += ["a" * n + u for n in (10, 100, 3000) for u in UNICODE]
    values += [f"localhost:5000/x{s}" for s in _SEPARATORS if s.strip() == s and s not in ("/", "//")]
    values += [f"localhost:5000/x{s}y" for s in ("--.", "-_", "___", "..", ":", "@", "\\")]
    values += [f"localhost:{p}" for p in ("٣٣", "²", "５０００", "0", "00000", "123456", "50 00", "+5000")]
    values += ["registry", "reg_istry.example.com", "-a.example.com", "a-.example.com", "ftp://x.example.com"]
    values += _generated(rng, 1000 - len(values))
    return values


def _best_ms(call: Callable[[str], object], text: str) -> float:
    """The best of SAMPLES timed calls of `call(text)`, in ms (a refusal raises; that is the call's end too)."""
    best = float("inf")
    for _ in range(SAMPLES):
        start = time.perf_counter()
        try:
            call(text)
        except Exception:  # noqa: BLE001 - the refusal is what is timed; tests/test_grammar.py checks which
            pass
        best = min(best, time.perf_counter() - start)
    return best * 1000


def measure_refusals(bench: Harness) -> None:
    from trainimg.registry.references import RegistryTarget

    values = hostile_values()
    times = {text: _best_ms(RegistryTarget.parse, text) for text in values}
    worst = max(times, key=times.__getitem__)
    bench.details["registry_refusal"] = {"values": len(values), "slowest": worst[:60],
                                         "median_ms": sorted(times.values())[len(times) // 2]}
    log(f"  grammar: {len(values)} hostile --registry values, slowest {times[worst]:.3f} ms ({worst[:40]!r})")
    bench.set("registry_refusal_ms", round(times[worst], 3),
              f"RegistryTarget.parse of {len(values)} hostile values in-process, each value's best of {SAMPLES}; "
              f"the slowest value's ({worst[:30]!r}...)")


def measure_near_misses(bench: Harness) -> None:
    from trainimg.recipe.grammar import REFERENCE_RE, REPOSITORY_RE

    def match_both(text: str) -> None:
        REFERENCE_RE.match(text)
        REPOSITORY_RE.match(text)

    times = [_best_ms(match_both, text) for text in LONG_NEAR_MISSES]
    bench.details["reference_near_miss"] = {"lengths": [len(t) for t in LONG_NEAR_MISSES], "ms": times}
    log(f"  grammar: 100,000-character near misses {', '.join(f'{t:.2f}' for t in times)} ms")
    bench.set("reference_near_miss_ms", round(max(times), 3),
              f"REFERENCE_RE and REPOSITORY_RE on {len(times)} 100,000-character near misses, best of {SAMPLES} "
              "each; the slowest")


def measure(bench: Harness) -> None:
    step("registry_refusal_ms", bench, lambda: measure_refusals(bench))
    step("reference_near_miss_ms", bench, lambda: measure_near_misses(bench))
