"""The one Hugging Face Hub client of the builder and the harness: a repo-id check, a
single-commit upload (results, a pull request) and a dataset folder's multi-commit upload of
the files a caller planned (dataset/publish.py: exactly a build's files). The
token comes from HF_TOKEN or `huggingface-cli login` and is never printed."""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from casu_dataset.core import atomic
from casu_dataset.core.errors import Field, FieldError, HubError, InputError

# ORG/NAME as the Hub accepts it: letters, digits, '-', '_', '.'; no '--' or '..'; at most 96 chars.
# push()'s arguments, named in its errors (the push command shows --repo and --folder).
REPO, FOLDER = Field("repo"), Field("folder")
_REPO_PART = re.compile(r"^(?![-.])(?!.*(--|\.\.))[A-Za-z0-9_.-]{1,96}(?<![-.])$")


class PushError(InputError, FieldError, ValueError):
    """A push that cannot start: a bad repo id, folder, run or setting; the message names the flag.
    Where the Hub could not be reached or refused the upload, a HubError (core.errors) says why."""


def check_repo_id(repo: str | None, flag: str | Field = REPO) -> str:
    """`repo` when it is ORG/NAME, else PushError naming `flag` (also for a missing repo: None):
    the field REPO, which the push command shows as its flag, or a caller's own flag text."""
    parts = repo.split("/") if isinstance(repo, str) else []
    if not isinstance(repo, str) or len(parts) != 2 or not all(_REPO_PART.match(p) for p in parts):
        raise PushError(flag, f" {repo!r}: expected ORG/NAME (letters, digits, '-', '_', '.')")
    return repo


def folder_operations(folder: str | Path, files: list[Path], prefix: str = "") -> list:
    """CommitOperationAdd for `files`, at their path relative to `folder` under `prefix`."""
    from huggingface_hub import CommitOperationAdd

    folder = Path(folder)
    return [
        CommitOperationAdd(path_in_repo=prefix + p.relative_to(folder).as_posix(), path_or_fileobj=str(p))
        for p in files
    ]


# The HTTP libraries huggingface_hub has used (requests before 1.0, httpx, the httpx2 fork from
# 2.x) and the layers under them: an exception raised from one of these modules is a network error.
_NETWORK_MODULES = (
    "httpx2",
    "httpx",
    "httpcore2",
    "httpcore",
    "requests",
    "urllib3",
    "h11",
    "h2",
    "ssl",
    "socket",
)
# Seconds a Hub call may wait to connect, or for one read or write (huggingface_hub 2.x waits forever).
HUB_TIMEOUT_ENV = "CASU_HUB_TIMEOUT"
DEFAULT_HUB_TIMEOUT = 60.0


def _network_errors() -> tuple:
    """What huggingface_hub raises for HTTP errors, refused, dropped or timed-out connections and
    offline mode, whichever HTTP client the installed version uses (its base error classes)."""
    from huggingface_hub.errors import HfHubHTTPError

    errs: list = [HfHubHTTPError, OSError, TimeoutError, ConnectionError]  # OSError: offline mode, no route
    for mod, name in (
        ("requests.exceptions", "RequestException"),
        ("httpx", "HTTPError"),
        ("httpx2", "HTTPError"),
        ("httpx2", "InvalidURL"),
        ("httpx2", "StreamError"),
        ("httpcore", "NetworkError"),
        ("httpcore", "TimeoutException"),
        ("urllib3.exceptions", "HTTPError"),
    ):
        try:
            errs.append(getattr(__import__(mod, fromlist=[name]), name))
        except (ImportError, AttributeError):
            pass
    return tuple(errs)


def is_network_error(err: BaseException) -> bool:
    """An error of the Hub connection (one of _network_errors, or any exception raised by the HTTP
    stack under huggingface_hub), as opposed to a bug in the caller."""
    if isinstance(err, _network_errors()):
        return True
    return any(c.__module__.split(".")[0] in _NETWORK_MODULES for c in type(err).__mro__)


def hub_timeout() -> float:
    """CASU_HUB_TIMEOUT (seconds, > 0), else 60; a bad value names the variable."""
    raw = os.environ.get(HUB_TIMEOUT_ENV)
    if raw is None or not raw.strip():
        return DEFAULT_HUB_TIMEOUT
    try:
        t = float(raw)
    except ValueError:
        t = -1.0
    if not t > 0 or t == float("inf"):
        raise PushError(f"{HUB_TIMEOUT_ENV}={raw!r}: give a number of seconds > 0")
    return t


_TIMEOUT_SET: list = []  # the timeout our client factory was installed with


def _ensure_timeout() -> None:
    """Install huggingface_hub's shared HTTP client with a timeout (CASU_HUB_TIMEOUT), so a Hub
    that stops answering fails with one line instead of hanging; a client factory the user set
    is left alone."""
    t = hub_timeout()
    try:
        from huggingface_hub.utils import _http
    except ImportError:
        return
    lib = getattr(_http, "httpx2", None) or getattr(_http, "httpx", None)
    current = getattr(_http, "_GLOBAL_CLIENT_FACTORY", None)
    ours = getattr(current, "_casu_timeout", None)
    if (
        lib is None
        or not hasattr(_http, "set_client_factory")
        or (current is not getattr(_http, "default_client_factory", None) and ours is None)
        or ours == t
    ):
        return
    default = _http.default_client_factory

    def factory():
        client = default()
        client.timeout = lib.Timeout(t)
        return client

    setattr(factory, "_casu_timeout", t)  # marks the factory as ours (read back with getattr above)
    _http.set_client_factory(factory)


@contextlib.contextmanager
def _quiet_retries():
    """huggingface_hub logs a warning line per retry of an upload ("Retrying in 8s [Retry 5/5]")
    before it gives up; a failure is reported as one line, so those are kept quiet unless the user
    asked for INFO or DEBUG (--verbosity)."""
    import logging

    log = logging.getLogger("huggingface_hub.utils._http")
    level = log.level
    # The user's verbosity is the library logger's; redact.guard_logging pins this HTTP logger
    # at WARNING (no raw headers at DEBUG), so its own level says nothing about what was asked.
    if logging.getLogger("huggingface_hub").getEffectiveLevel() >= logging.WARNING:
        log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        log.setLevel(level)


def _api(api, token):
    from huggingface_hub import HfApi

    _ensure_timeout()
    return api or HfApi(token=token)


def can_gate() -> bool:
    """Whether the installed huggingface_hub can gate a repo (HfApi.update_repo_settings(gated=...))."""
    import inspect

    from huggingface_hub import HfApi

    fn = getattr(HfApi, "update_repo_settings", None)
    return fn is not None and "gated" in inspect.signature(fn).parameters


def _upload_error(err: BaseException, flag: str | Field, repo: str, token: str | None) -> HubError:
    from casu_dataset.core.redact import redact

    if isinstance(err, HubError):
        return err
    offline = (
        "; HF_HUB_OFFLINE=1 is set (offline): unset it to upload"
        if os.environ.get("HF_HUB_OFFLINE") == "1"
        else ""
    )
    lines = [x.strip() for x in str(err).splitlines() if x.strip()]
    if not lines and is_network_error(err):  # httpx's timeouts and dropped connections may carry no text
        lines = ["the connection to the Hub failed"]
    if "Timeout" in type(err).__name__:
        lines = [
            f"{lines[0]}: no answer within {hub_timeout():g} s; {HUB_TIMEOUT_ENV}=SECONDS sets the limit"
        ]
    # an HTTP error's first line says why; a card the Hub refused lists its errors on the next lines
    what = " ".join(lines) if isinstance(err, ValueError) else (lines[0] if lines else "")
    return HubError(
        flag, redact(f" {repo}: upload failed ({type(err).__name__}: {what}){offline}", [token or ""])
    )


def _create(api, repo: str, repo_type: str, private: bool, gated: bool) -> None:
    api.create_repo(repo_id=repo, repo_type=repo_type, private=private, exist_ok=True)
    if gated:  # lm-eval's gated=true: access requests, approved automatically
        api.update_repo_settings(repo_id=repo, repo_type=repo_type, gated="auto")


def commit(
    repo: str,
    operations: list,
    message: str,
    api=None,
    token: str | None = None,
    private: bool = True,
    flag: str | Field = REPO,
    repo_type: str = "dataset",
    create_pr: bool = False,
    description: str | None = None,
    gated: bool = False,
):
    """Upload `operations` in one commit (a dataset repo is created, private by default, if
    missing, and gated with `gated`; with `create_pr` the commit is a pull request on an existing
    repo). A failure is one HubError line naming the flag, the repo and why (offline, refused, not found)."""
    check_repo_id(repo, flag)
    hub_timeout()  # a bad CASU_HUB_TIMEOUT is a usage error, before anything is sent
    try:
        api = _api(api, token)
        if not create_pr:
            _create(api, repo, repo_type, private, gated)
        else:  # the repo must exist; a plain request also fails fast where the commit's upload would retry
            api.repo_info(repo_id=repo, repo_type=repo_type, timeout=hub_timeout())
        with _quiet_retries():
            return api.create_commit(
                repo_id=repo,
                repo_type=repo_type,
                operations=operations,
                commit_message=message,
                create_pr=create_pr,
                commit_description=description,
            )
    except Exception as err:  # noqa: BLE001 - the network ones become one line, the rest propagate
        if not is_network_error(err):
            raise
        raise _upload_error(err, flag, repo, token) from None


# Never sent with a dataset folder: temp files of unfinished writes (atomic.TMP_GLOB) and what
# upload_folder always leaves out (.git/, the .cache/huggingface/ that hf downloads leave).
# As fnmatch patterns (`*` crosses '/'), so the plan and upload_folder filter the folder alike.
PUSH_IGNORE = [atomic.TMP_GLOB, "*/" + atomic.TMP_GLOB]


def _exact(rel: str) -> str:
    """An fnmatch pattern that matches exactly the path `rel` (its wildcard characters escaped)."""
    return re.sub(r"([*?\[])", r"[\1]", rel)


def upload_files(
    folder: str | Path,
    repo: str,
    files: list[str],
    api=None,
    private: bool = True,
    message: str | None = None,
    token: str | None = None,
):
    """Upload exactly `files` (paths relative to `folder`, planned by the caller: see
    dataset/publish.py) to a Hub dataset repo (created private unless `private=False`).

    huggingface_hub's upload_folder, restricted to those paths: with hf_xet installed it commits a
    large folder in several batches (adaptive, from about 250 files a commit) and a re-run resumes,
    skipping the files already committed; a failure is one HubError line."""
    check_repo_id(repo)
    if not files:
        raise PushError(FOLDER, f" {folder}: nothing to upload")
    hub_timeout()
    try:
        api = _api(api, token)
        _create(api, repo, "dataset", private, False)
        with _quiet_retries():
            return api.upload_folder(
                repo_id=repo,
                repo_type="dataset",
                folder_path=str(folder),
                allow_patterns=[_exact(f) for f in files],
                ignore_patterns=list(PUSH_IGNORE),
                commit_message=message or f"Upload CASU dataset ({len(files)} files)",
            )
    except Exception as err:  # noqa: BLE001 - ValueError: the Hub refused the card's metadata
        if not (is_network_error(err) or isinstance(err, ValueError)):
            raise
        raise _upload_error(err, REPO, repo, token) from None
