"""Where advisories come from (`--advisories DIR|URL`), and how old they are.

A folder of OSV records (an air-gapped site's copy of a database: OSV's JSON export, or the PyPA advisory database's
YAML, one record per file, any depth) is read whole; its data is as old as its newest record's ``modified``. A URL
is an OSV-compatible service (OSV's own API, a mirror): ``POST /v1/querybatch`` asks for every pin at once and
answers one result per query with the ids of the records that affect it (a result with ``next_page_token`` is
asked again with it), then ``GET /v1/vulns/<id>`` gives each record; its data is as old as the date it states for
its answer: ``Last-Modified`` (a mirror says when its data was taken), else its ``Date`` (a live service answers
from data it keeps current).

Nothing is assumed: an unreachable service, an answer that is not OSV's shape, a result missing for a pin (the
service did not answer for that package), a record that cannot be read, a folder with no records, or data older
than `--max-age` days each fail the audit (`CheckFailed`, exit 1) naming what and where.
"""

from __future__ import annotations

import datetime
import email.utils
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
import yaml

from ..errors import CheckFailed, UserInputError
from .osv import ECOSYSTEM, Advisory, OsvError

RECORD_SUFFIXES = (".json", ".yaml", ".yml")
QUERY_TIMEOUT = 60.0  # seconds for one request to the service
BATCH = 1000  # queries per querybatch request (OSV's API takes up to 1000)


Pin = tuple[str, str]  # (PEP 503 normalised name, version as pinned)


@dataclass
class Answer:
    """What a source said: for each pin, the records that may affect it (a service: those it says do); the data's
    date and where that date comes from."""

    source: str
    date: datetime.datetime
    dated_by: str
    records: dict[Pin, list[Advisory]] = field(default_factory=dict)
    asserted: bool = False  # the source itself said each record affects its pin (a service), not only names it


def parse_time(text: str, where: str) -> datetime.datetime:
    """An RFC 3339 timestamp (OSV's ``modified``) as an aware datetime."""
    try:
        stamp = datetime.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
    except ValueError:
        raise OsvError(f"{where}: {text!r} is not an RFC 3339 time") from None
    return stamp if stamp.tzinfo else stamp.replace(tzinfo=datetime.timezone.utc)


def check_age(answer: Answer, max_age_days: int, now: datetime.datetime) -> None:
    """Fail when the source's data is older than `max_age_days` days (or dated in the future by more than a day:
    a clock that wrong dates nothing)."""
    age = now - answer.date
    if age > datetime.timedelta(days=max_age_days):
        raise CheckFailed(f"{answer.source}: its data is from {answer.date:%Y-%m-%d} ({answer.dated_by}), "
                          f"{age.days} days old, older than --max-age {max_age_days} days: refresh it")
    if age < -datetime.timedelta(days=1):
        raise CheckFailed(f"{answer.source}: its data is dated {answer.date:%Y-%m-%d}, after this machine's clock "
                          f"({now:%Y-%m-%d})")


# -- a folder -------------------------------------------------------------------------------------------------------


def _records_in(path: Path) -> Iterable[tuple[Any, str]]:
    """(record, where) of every record file under `path`; a file may hold one record or a list of them."""
    for file in sorted(p for p in path.rglob("*") if p.suffix in RECORD_SUFFIXES and p.is_file()
                       and not any(part.startswith(".") for part in p.relative_to(path).parts)):
        text = file.read_text(encoding="utf-8")
        try:
            data = json.loads(text) if file.suffix == ".json" else yaml.load(text, Loader=yaml.CSafeLoader)
        except (ValueError, yaml.YAMLError) as err:
            raise OsvError(f"{file}: not an OSV record: {str(err).splitlines()[0]}") from None
        for record in data if isinstance(data, list) else [data]:
            yield record, str(file)


def read_folder(path: Path, wanted: Iterable[Pin]) -> Answer:
    """Every record of the folder, kept for the `wanted` pins whose package it names."""
    by_name: dict[str, list[Pin]] = defaultdict(list)
    for pin in wanted:
        by_name[pin[0]].append(pin)
    found: dict[Pin, list[Advisory]] = defaultdict(list)
    newest = None
    count = 0
    for data, where in _records_in(path):
        advisory = Advisory.from_json(data, where)
        count += 1
        stamp = parse_time(advisory.modified, f"{where}: modified") if advisory.modified else None
        newest = stamp if stamp and (newest is None or stamp > newest) else newest
        for name in advisory.packages() & set(by_name):
            for pin in by_name[name]:
                found[pin].append(advisory)
    if not count or newest is None:
        raise CheckFailed(f"{path}: no OSV record (*.json, *.yaml) with a 'modified' time in it")
    return Answer(str(path), newest, "its newest record's modified", dict(found))


# -- a service -------------------------------------------------------------------------------------------------------


def _base(url: str) -> str:
    base = url.rstrip("/")
    return base[:-3] if base.endswith("/v1") else base


def _call(method: str, url: str, **kwargs: Any) -> requests.Response:
    try:
        response = requests.request(method, url, timeout=QUERY_TIMEOUT, **kwargs)
    except requests.RequestException as err:
        raise CheckFailed(f"{url}: the advisory service could not be reached: {type(err).__name__}") from None
    if response.status_code != 200:
        raise CheckFailed(f"{url}: the advisory service answered HTTP {response.status_code}")
    return response


def _json(response: requests.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise CheckFailed(f"{response.url}: the advisory service's answer is not JSON") from None


def _dated(response: requests.Response) -> tuple[datetime.datetime, str]:
    for header in ("Last-Modified", "Date"):
        if response.headers.get(header):
            try:
                return email.utils.parsedate_to_datetime(response.headers[header]), f"the service's {header}"
            except (TypeError, ValueError):
                raise CheckFailed(f"{response.url}: its {header} {response.headers[header]!r} is not a date") \
                    from None
    raise CheckFailed(f"{response.url}: the advisory service states no date for its data (no Last-Modified, no "
                      "Date): how old it is cannot be told")


def _batch(base: str, pins: list[tuple[str, str]], tokens: Mapping[int, str]) -> tuple[list[Any], requests.Response]:
    queries = []
    for i, (name, version) in enumerate(pins):
        query: dict[str, Any] = {"package": {"name": name, "ecosystem": ECOSYSTEM}, "version": version}
        if i in tokens:
            query["page_token"] = tokens[i]
        queries.append(query)
    response = _call("POST", f"{base}/v1/querybatch", json={"queries": queries})
    results = _json(response).get("results") if isinstance(_json(response), dict) else None
    if not isinstance(results, list):
        raise CheckFailed(f"{response.url}: the answer has no 'results' list")
    for i, (name, version) in enumerate(pins):
        if i >= len(results) or not isinstance(results[i], dict):
            raise CheckFailed(f"{response.url}: no answer for {name}=={version}: the service did not answer for "
                              "that package")
    return results, response


def query_service(url: str, pins: Iterable[Pin]) -> Answer:
    """Ask the service for every pin (querybatch, pages followed), then fetch each record it named."""
    base, ids = _base(url), defaultdict(set)  # type: str, dict[Pin, set[str]]
    items = sorted(set(pins))
    date: tuple[datetime.datetime, str] | None = None
    for start in range(0, len(items), BATCH):
        chunk, tokens = items[start:start + BATCH], {}  # type: list[tuple[str, str]], dict[int, str]
        while True:
            results, response = _batch(base, chunk, tokens)
            date = date or _dated(response)
            for i, result in enumerate(results[:len(chunk)]):
                if i in tokens or not tokens:
                    ids[chunk[i]].update(str(v.get("id")) for v in result.get("vulns") or () if isinstance(v, dict))
            tokens = {i: str(r["next_page_token"]) for i, r in enumerate(results[:len(chunk)])
                      if r.get("next_page_token")}
            if not tokens:
                break
    records: dict[str, Advisory] = {}
    for vid in sorted(set().union(*ids.values()) if ids else ()):
        response = _call("GET", f"{base}/v1/vulns/{vid}")
        records[vid] = Advisory.from_json(_json(response), f"{base}/v1/vulns/{vid}")
    if date is None:
        raise UserInputError("nothing to audit: no pins", where="--advisories")
    return Answer(url, date[0], date[1], {pin: [records[i] for i in sorted(found)] for pin, found in ids.items()},
                  asserted=True)


def is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def ask(source: str, pins: Iterable[Pin]) -> Answer:
    """The answer of `--advisories DIR|URL` for `pins`."""
    if is_url(source):
        return query_service(source, pins)
    path = Path(source)
    if not path.is_dir():
        raise UserInputError(f"{source} is neither a folder of OSV records nor an http(s) URL", where="--advisories")
    return read_folder(path, pins)
