"""The one Hugging Face Hub client of the builder and the harness: a repo-id check and a
single-commit upload. The token comes from HF_TOKEN or `huggingface-cli login` and is never printed."""
from __future__ import annotations

import os
import re
from pathlib import Path

from . import atomic

# ORG/NAME as the Hub accepts it: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 chars.
_REPO_PART = re.compile(r"^(?![-.])(?!.*(--|\.\.))[A-Za-z0-9_.-]{1,96}(?<![-.])$")


class HubError(ValueError):
    """A bad repo id, or an upload that failed (the message names the flag and the reason)."""


class HubUploadError(HubError):
    """The Hub could not be reached (offline, no route) or refused the upload."""


def check_repo_id(repo: str, flag: str = "--repo") -> str:
    parts = repo.split("/") if isinstance(repo, str) else []
    if len(parts) != 2 or not all(_REPO_PART.match(p) for p in parts):
        raise HubError(f"{flag} {repo!r}: expected ORG/NAME (letters, digits, '-', '_', '.')")
    return repo


def folder_operations(folder: str | Path, files: list[Path] | None = None, prefix: str = "") -> list:
    """CommitOperationAdd for `files` (default: every file under `folder` except temp files of
    unfinished writes), at their path relative to `folder` under `prefix`."""
    from huggingface_hub import CommitOperationAdd
    folder = Path(folder)
    if files is None:
        files = sorted(p for p in folder.rglob("*") if p.is_file() and not atomic.is_tmp(p))
    return [CommitOperationAdd(path_in_repo=prefix + p.relative_to(folder).as_posix(), path_or_fileobj=str(p))
            for p in files]


def _network_errors() -> tuple:
    """What huggingface_hub raises for HTTP errors, refused or missing connections, offline mode."""
    from huggingface_hub.errors import HfHubHTTPError
    errs: list = [HfHubHTTPError, OSError]  # OSError: offline mode, no route, refused
    for mod, name in (("requests.exceptions", "RequestException"), ("httpx", "HTTPError")):
        try:
            errs.append(getattr(__import__(mod, fromlist=[name]), name))
        except ImportError:
            pass
    return tuple(errs)


def commit(repo: str, operations: list, message: str, api=None, token: str | None = None, private: bool = True,
           flag: str = "--repo", repo_type: str = "dataset", create_pr: bool = False, description: str | None = None):
    """Upload `operations` in one commit (a dataset repo is created, private by default, if
    missing; with `create_pr` the commit is a pull request on an existing repo). A failure is one
    HubError line naming the flag, the repo and why (offline, refused, not found)."""
    from huggingface_hub import HfApi

    from .redact import redact
    check_repo_id(repo, flag)
    api = api or HfApi(token=token)
    try:
        if not create_pr:
            api.create_repo(repo_id=repo, repo_type=repo_type, private=private, exist_ok=True)
        return api.create_commit(repo_id=repo, repo_type=repo_type, operations=operations, commit_message=message,
                                 create_pr=create_pr, commit_description=description)
    except _network_errors() as err:
        offline = "; HF_HUB_OFFLINE=1 is set (offline): unset it to upload" \
            if os.environ.get("HF_HUB_OFFLINE") == "1" else ""
        what = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise HubUploadError(redact(f"{flag} {repo}: upload failed ({type(err).__name__}: {what}){offline}",
                              [token or ""])) from None


def plan_push(folder: str | Path):
    """The exact commit operations `push` sends: every file of the dataset folder."""
    folder = Path(folder)
    if not (folder / "README.md").is_file():
        raise FileNotFoundError(f"{folder}: not a dataset folder (no README.md card)")
    return folder_operations(folder)


def push(folder: str | Path, repo: str, api=None, private: bool = False, message: str | None = None):
    """Upload a built dataset folder to a Hub dataset repo in one commit."""
    check_repo_id(repo)
    ops = plan_push(folder)
    return commit(repo, ops, message or f"Upload CASU dataset ({len(ops)} files)", api=api, private=private)
