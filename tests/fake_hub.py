"""A local HTTP server standing in for the Hugging Face Hub, for the push tests: it records every
request and answers as the Hub does (create repo, validate the card, preupload, commit, repo info,
repo settings). It keeps what was committed per repo, so a preupload of an unchanged file answers
with its oid and a re-run of upload_folder skips it; every file is "regular", so no xet transfer
happens. `status` != 200 refuses every POST and PUT; `fail_commits` refuses that many commits
first. Binds port 0; nothing here touches the network."""

from __future__ import annotations

import base64
import hashlib
import http.server
import json
import threading


def git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _repo(path: str, verb: str) -> str:
    """`/api/datasets/ORG/NAME/<verb>/...` -> `datasets/ORG/NAME`."""
    return path.split(f"/{verb}/")[0][len("/api/") :]


class FakeHub:
    def __init__(self, status: int = 200, fail_commits: int = 0):
        self.requests: list[dict] = []
        self.files: dict[tuple[str, str], bytes] = {}  # (repo, path) -> committed bytes
        self.commits: list[list[str]] = []  # the paths of each commit, in order
        self.fail_commits = fail_commits
        hub = self

        class H(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _reply(self, code, body):
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _record(self, method: str) -> bytes:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hub.requests.append(
                    {
                        "method": method,
                        "path": self.path,
                        "body": body,
                        "auth": self.headers.get("authorization"),
                    }
                )
                return body

            def do_POST(self):
                body = self._record("POST")
                if status != 200:
                    return self._reply(status, {"error": "You don't have the rights to do that"})
                if self.path == "/api/repos/create":
                    b = json.loads(body)
                    return self._reply(
                        200,
                        {
                            "url": f"{hub.url}/{b.get('type', 'model')}s/{b['organization']}/{b['name']}"
                            if b.get("organization")
                            else f"{hub.url}/datasets/me/{b['name']}"
                        },
                    )
                if self.path == "/api/validate-yaml":  # the card's metadata is checked before the commit
                    return self._reply(200, {"errors": [], "warnings": []})
                if "/preupload/" in self.path:
                    repo = _repo(self.path, "preupload")
                    return self._reply(
                        200,
                        {
                            "files": [
                                {
                                    "path": f["path"],
                                    "uploadMode": "regular",
                                    "shouldIgnore": False,
                                    "oid": git_oid(hub.files[repo, f["path"]])
                                    if (repo, f["path"]) in hub.files
                                    else None,
                                }
                                for f in json.loads(body)["files"]
                            ]
                        },
                    )
                if "/commit/" in self.path:
                    if hub.fail_commits:
                        hub.fail_commits -= 1
                        return self._reply(403, {"error": "You don't have the rights to commit"})
                    repo = _repo(self.path, "commit")
                    got = {
                        x["value"]["path"]: base64.b64decode(x["value"]["content"])
                        for x in map(json.loads, body.decode().splitlines())
                        if x["key"] == "file"
                    }
                    hub.files.update({(repo, p): b for p, b in got.items()})
                    hub.commits.append(sorted(got))
                    pr = "create_pr" in self.path
                    return self._reply(
                        200,
                        {
                            "commitUrl": f"{hub.url}/{repo}/commit/{'a' * 40}",
                            "commitOid": "a" * 40,
                            "pullRequestUrl": f"{hub.url}/{repo}/discussions/7" if pr else None,
                        },
                    )
                self._reply(404, {"error": "unexpected " + self.path})

            def do_GET(self):
                self._record("GET")
                if "/revision/" in self.path:  # repo_info, after an upload that had nothing to commit
                    repo = self.path.split("/revision/")[0][len("/api/datasets/") :]
                    return self._reply(200, {"id": repo, "sha": "a" * 40, "private": True})
                parts = self.path.split("?")[0].strip("/").split("/")
                if len(parts) == 4 and parts[1] in ("models", "datasets"):  # repo_info: /api/<type>s/ORG/NAME
                    if status != 200:
                        return self._reply(status, {"error": "You don't have the rights to do that"})
                    return self._reply(
                        200, {"id": f"{parts[2]}/{parts[3]}", "sha": "a" * 40, "private": False}
                    )
                self._reply(404, {"error": "not here"})

            def do_PUT(self):  # repo settings (gated)
                self._record("PUT")
                self._reply(status, {} if status == 200 else {"error": "no"})

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def commit_lines(self) -> list[dict]:
        """The lines (header and operations) of the first commit request."""
        c = next(r for r in self.requests if "/commit/" in r["path"])
        return [json.loads(line) for line in c["body"].decode().splitlines()]

    def committed(self) -> dict[str, set[str]]:
        """ORG/NAME of each dataset repo -> the paths of the files its commits added."""
        out: dict[str, set[str]] = {}
        for repo, path in self.files:
            out.setdefault(repo.removeprefix("datasets/"), set()).add(path)
        return out

    def created(self) -> dict[str, dict]:
        return {
            f"{b['organization']}/{b['name']}": b
            for b in (json.loads(r["body"]) for r in self.requests if r["path"] == "/api/repos/create")
        }

    def close(self):
        self.server.shutdown()
