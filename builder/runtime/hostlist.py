"""Slurm's hostlist syntax, both ways: ``node[01-04,07],gpu5`` <-> ``[node01, node02, node03, node04, node07, gpu5]``,
and its task-count lists: ``4(x2),1`` <-> ``[4, 4, 1]``.

Slurm hands every task ``SLURM_STEP_NODELIST``/``SLURM_JOB_NODELIST`` and ``SLURM_STEP_TASKS_PER_NODE`` in these
compressed forms (``srun(1)``, ``scontrol show hostnames``); the launcher must expand them to find the first host
(the rendezvous) and this node's task count, and the conformance replay writes them as Slurm would.
A bracket may hold ranges and single numbers; zero padding is kept (``01-10``); several bracket groups in one name
(``rack[1-2]-n[1-2]``) expand as Slurm does, the last group fastest. Standard library only.
"""

from __future__ import annotations

import re

_RANGE = re.compile(r"([0-9]+)(?:-([0-9]+))?")
_COUNT = re.compile(r"([0-9]+)(?:\(x([0-9]+)\))?")
MAX_HOSTS = 100_000  # more than any cluster; a typo like node[1-999999999] must not exhaust memory


def expand(text: str) -> list[str]:
    """Every host of a hostlist, in Slurm's order. Raises ValueError (one line) for anything else."""
    hosts: list[str] = []
    for item in _split_top(text.strip()):
        hosts += _expand_item(item)
        if len(hosts) > MAX_HOSTS:
            raise ValueError(f"hostlist {text!r} names more than {MAX_HOSTS} hosts")
    if not hosts:
        raise ValueError(f"hostlist {text!r} names no host")
    return hosts


def _split_top(text: str) -> list[str]:
    """Split at commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"hostlist {text!r} nests brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist {text!r} closes a bracket it never opened")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"hostlist {text!r} has an unclosed '['")
    items.append(text[start:])
    if any(not item for item in items):
        raise ValueError(f"hostlist {text!r} has an empty entry")
    return items


def _expand_item(item: str) -> list[str]:
    head, bracket, rest = item.partition("[")
    if not bracket:
        return [item]
    inside, _, tail = rest.partition("]")
    numbers: list[str] = []
    for part in inside.split(","):
        match = _RANGE.fullmatch(part.strip())
        if not match:
            raise ValueError(f"hostlist entry {item!r}: {part!r} is not a number or a range")
        low, high = match.group(1), match.group(2) or match.group(1)
        if int(high) < int(low):
            raise ValueError(f"hostlist entry {item!r}: range {part!r} runs backwards")
        if int(high) - int(low) > MAX_HOSTS:
            raise ValueError(f"hostlist entry {item!r}: range {part!r} names more than {MAX_HOSTS} hosts")
        width = len(low)
        numbers += [str(n).zfill(width) for n in range(int(low), int(high) + 1)]
    return [f"{head}{number}{suffix}" for number in numbers for suffix in _expand_item(tail)]


def compress(hosts: list[str]) -> str:
    """The hostlist Slurm would write for `hosts` (in order): a shared prefix and a bracket of their numbers."""
    groups: list[tuple[str, list[str]]] = []
    for name in hosts:
        match = re.fullmatch(r"(.*?)([0-9]+)", name)
        prefix, number = (match.group(1), match.group(2)) if match else (name, "")
        if number and groups and groups[-1][0] == prefix and groups[-1][1] and \
                len(groups[-1][1][-1]) == len(number):
            groups[-1][1].append(number)
        else:
            groups.append((prefix, [number] if number else []))
    out = []
    for prefix, numbers in groups:
        if len(numbers) <= 1:
            out.append(prefix + (numbers[0] if numbers else ""))
        else:
            out.append(f"{prefix}[{','.join(_ranges(numbers))}]")
    return ",".join(out)


def _ranges(numbers: list[str]) -> list[str]:
    spans: list[list[str]] = []
    for number in numbers:
        if spans and int(number) == int(spans[-1][-1]) + 1:
            spans[-1].append(number)
        else:
            spans.append([number])
    return [span[0] if len(span) == 1 else f"{span[0]}-{span[-1]}" for span in spans]


def expand_counts(text: str) -> list[int]:
    """``SLURM_TASKS_PER_NODE`` form: ``2(x3),1`` -> ``[2, 2, 2, 1]``."""
    counts: list[int] = []
    for part in text.strip().split(","):
        match = _COUNT.fullmatch(part.strip())
        if not match:
            raise ValueError(f"task counts {text!r}: {part!r} is not N or N(xM)")
        repeat = int(match.group(2) or 1)
        if repeat > MAX_HOSTS or len(counts) + repeat > MAX_HOSTS:
            raise ValueError(f"task counts {text!r} name more than {MAX_HOSTS} nodes")
        counts += [int(match.group(1))] * repeat
    return counts


def compress_counts(counts: list[int]) -> str:
    """``[2, 2, 2, 1]`` -> ``2(x3),1``, as Slurm writes it."""
    out: list[list[int]] = []
    for count in counts:
        if out and out[-1][0] == count:
            out[-1][1] += 1
        else:
            out.append([count, 1])
    return ",".join(str(c) if n == 1 else f"{c}(x{n})" for c, n in out)
