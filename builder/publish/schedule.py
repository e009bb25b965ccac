"""The schedule side of the CI pipelines (`trainimg ci github|gitlab --schedule CRON`): images that stay current
without a person watching.

On each scheduled run the pipeline's stage and promote jobs run as on a push (the rebuild: the inputs key holds the
base resolved to its digest, so a variant whose base was republished with OS fixes is rebuilt, tested and
released, and one whose inputs did not change is skipped and pushes nothing), and one `bump` job runs `trainimg
outdated`: exit 0 ends it (nothing new), anything but 0 or 1 fails it (an index that could not be read is never
"nothing new"), 1 runs `trainimg bump`, commits what moved on a branch of its own and opens a merge request
through GitLab's merge request API (`POST /projects/:id/merge_requests`) or a pull request through GitHub's pulls
API (`POST /repos/{owner}/{repo}/pulls`), its title and description `bump --summary`'s. The token is named, never
written: GitHub's `GITHUB_TOKEN` secret by default (a pull request it opens starts no workflow: give a PAT's or an
app's secret with `--token-var` for CI to run on it), on GitLab a masked variable holding a project access token
with `api` and `write_repository` (`CI_JOB_TOKEN` may neither push nor open a merge request). The job's own files
(outdated.json, bump.md, the request body) stay out of the commit, in `WORK`, handed on as artifacts.
"""

from __future__ import annotations

import shlex
from typing import Any

from ..options.ci import CiOptions

WORK = ".trainimg-schedule"
BRANCH = "trainimg/bump-"  # + the CI run's id
TOKEN_VARS = {"github": "GITHUB_TOKEN", "gitlab": "TRAINIMG_BOT_TOKEN"}
BOT = ("trainimg bump", "trainimg-bump@users.noreply.local")  # the commit's author (the merge request's reviewer
#                                                               sees who asked for it: the schedule)
# The request body from bump's summary: its first line is the title, the rest the description.
REQUEST = ('import json, sys; title, _, body = open(sys.argv[1]).read().partition("\\n"); '
           "print(json.dumps({{{fields}}}))")


def token_var(opts: CiOptions) -> str:
    return opts.token_var or TOKEN_VARS[opts.system]


def _index(opts: CiOptions) -> list[str]:
    return ["--index-url", opts.index_url] if opts.index_url else []


def outdated_line(trainimg: list[str], opts: CiOptions) -> str:
    """`trainimg outdated`, its exit status kept in `rc`: 0 stops here, 1 goes on, anything else fails."""
    run = shlex.join([*trainimg, "outdated", "--json", f"{WORK}/outdated.json", *_index(opts)])
    return f'mkdir -p {WORK} && echo "{WORK}/" >> .git/info/exclude; rc=0; {run} || rc=$?'


def bump_lines(trainimg: list[str], opts: CiOptions, branch: str, base: str, request: list[str],
               push: str) -> list[str]:
    """The bump, the commit on `branch`, its `push` (each system's own), and the API request (`request`: the curl
    words, shell-quoted, its URL last)."""
    run = shlex.join([*trainimg, "bump", "--summary", f"{WORK}/bump.md", *_index(opts)])
    fields = ", ".join(f'"{k}": {v}' for k, v in request_fields(opts.system).items())
    body = f'python3 -c {shlex.quote(REQUEST.format(fields=fields))} {WORK}/bump.md "{branch}" "{base}"'
    git = f"git -c user.name={shlex.quote(BOT[0])} -c user.email={BOT[1]}"
    # This file again, from the moved recipes: a renamed variant's stage job comes with the bump that renamed it.
    again = [shlex.join([*trainimg, "ci", opts.system, *opts.regenerate])] if opts.regenerate else []
    return [
        f'rc=0; {run} || rc=$?; echo "$rc" > {WORK}/bump.rc', *again,
        f'if [ -z "$(git status --porcelain)" ]; then echo "trainimg: nothing moved"; exit "$(cat {WORK}/bump.rc)"; fi',
        f'git checkout -q -b "{branch}" && git add -A && {git} commit -q -F {WORK}/bump.md', push,
        f"{body} > {WORK}/request.json",
        " ".join([*request[:-1], f"--data @{WORK}/request.json", request[-1]]),
        f'exit "$(cat {WORK}/bump.rc)"',
    ]


def request_fields(system: str) -> dict[str, str]:
    """The API's fields, as Python expressions over the title, the body and argv (branch, base)."""
    if system == "github":
        return {"title": "title", "body": "body.strip()", "head": "sys.argv[2]", "base": "sys.argv[3]"}
    return {"title": "title", "description": "body.strip()", "source_branch": "sys.argv[2]",
            "target_branch": "sys.argv[3]", "remove_source_branch": "True"}


def checkout(opts: CiOptions) -> dict[str, Any]:
    """The bump job's checkout: with --token-var, that token is the one its push uses (checkout keeps it for git),
    which may push a change to the workflow file itself (GITHUB_TOKEN may not: no `workflows` permission)."""
    step: dict[str, Any] = {"uses": "actions/checkout@v4"}
    if opts.token_var:
        step["with"] = {"token": f"${{{{ secrets.{opts.token_var} }}}}"}
    return step


def github_job(trainimg: list[str], opts: CiOptions, setup: dict[str, Any], runner: Any) -> dict[str, Any]:
    """The bump job of the GitHub workflow: on the schedule (or by hand), with the rights to push and open a PR."""
    branch = f"{BRANCH}${{{{ github.run_id }}}}"
    request = ["curl --fail-with-body -sS -X POST", '-H "Accept: application/vnd.github+json"',
               '-H "Authorization: Bearer $GH_TOKEN"', '-H "X-GitHub-Api-Version: 2022-11-28"',
               '"https://api.github.com/repos/${{ github.repository }}/pulls"']
    lines = bump_lines(trainimg, opts, branch, "${{ github.event.repository.default_branch }}", request,
                       f'git push -q origin "HEAD:refs/heads/{branch}"')
    return {"name": "bump", "runs-on": runner, "permissions": {"contents": "write", "pull-requests": "write"},
            "if": "${{ github.event_name == 'schedule' || github.event_name == 'workflow_dispatch' }}",
            "steps": [checkout(opts), setup,
                      {"name": "what is newer upstream", "id": "outdated",
                       "run": outdated_line(trainimg, opts) + '; echo "rc=$rc" >> "$GITHUB_OUTPUT"; '
                                                              '[ "$rc" = 0 ] || [ "$rc" = 1 ]'},
                      {"name": "bump the recipes and open a pull request",
                       "if": "${{ steps.outdated.outputs.rc == '1' }}",
                       "env": {"GH_TOKEN": f"${{{{ secrets.{token_var(opts)} }}}}"}, "run": "\n".join(lines)},
                      {"if": "${{ !cancelled() }}", "uses": "actions/upload-artifact@v4",
                       "with": {"name": "bump", "path": f"{WORK}/", "if-no-files-found": "ignore"}}]}


def gitlab_job(trainimg: list[str], opts: CiOptions, install: str) -> dict[str, Any]:
    """The bump job of the .gitlab-ci.yml: in schedule pipelines only, needing nothing."""
    token = token_var(opts)
    request = ["curl --fail-with-body -sS -X POST", f'-H "PRIVATE-TOKEN: ${token}"',
               '-H "Content-Type: application/json"', '"$CI_API_V4_URL/projects/$CI_PROJECT_ID/merge_requests"']
    lines = bump_lines(trainimg, opts, "$BUMP_BRANCH", "$CI_DEFAULT_BRANCH", request,
                       'git push -q "$BUMP_REMOTE" "HEAD:refs/heads/$BUMP_BRANCH"')
    stop = 'if [ "$rc" = 0 ]; then echo "trainimg: nothing new upstream"; exit 0; fi; [ "$rc" = 1 ] || exit "$rc"'
    return {"stage": "bump", "needs": [], "rules": [{"if": '$CI_PIPELINE_SOURCE == "schedule"'}],
            "variables": {"BUMP_BRANCH": f"{BRANCH}$CI_PIPELINE_ID",
                          "BUMP_REMOTE": f"https://oauth2:${{{token}}}@$CI_SERVER_HOST/$CI_PROJECT_PATH.git"},
            "before_script": [install], "script": [f"{outdated_line(trainimg, opts)}; {stop}", *lines],
            "artifacts": {"paths": [f"{WORK}/"], "when": "always", "expire_in": "1 week"}}
