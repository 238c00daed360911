"""`push --repo ORG/NAME`: upload a built dataset folder to the Hugging Face Hub (exactly the
files its build record lists, verified first: dataset/publish.py)."""

from __future__ import annotations

import os

from casu_dataset.cli.common import long_flag


def add(sub) -> None:
    p = sub.add_parser("push", help="upload a built dataset folder to the Hugging Face Hub")
    p.add_argument("--repo", required=True, help="ORG/NAME of the dataset repo")
    p.add_argument("--folder", default="casu", help="the built dataset folder")
    vis = p.add_mutually_exclusive_group()
    vis.add_argument("--public", action="store_true", help="create the repo public (default: private)")
    vis.add_argument("--private", action="store_true", help="create the repo private (the default)")
    p.add_argument("--dry_run", action="store_true", help="list the files that would be sent, upload nothing")
    # The one command that goes online (unless the user set HF_HUB_OFFLINE): see cli.main.
    # hub.push's arguments (repo, folder) named in its errors are these flags
    p.set_defaults(fn=run, online=True, flag=long_flag)


def run(args) -> int:
    from casu_dataset.core.hub import check_repo_id
    from casu_dataset.dataset.publish import plan_push, push

    private = not args.public
    check_repo_id(args.repo)  # a dry run checks what the real push would: PushError naming --repo
    files = plan_push(args.folder)
    if args.dry_run:
        print(
            f"would upload {len(files)} files of {args.folder} to the {'private' if private else 'public'} "
            f"dataset repo {args.repo}:"
        )
        print("\n".join(f"  {f}" for f in files))
        return 0
    info = push(args.folder, args.repo, private=private, token=os.environ.get("HF_TOKEN"))
    print(
        f"pushed {len(files)} files of {args.folder} -> https://huggingface.co/datasets/{args.repo} "
        f"({'private' if private else 'public'}; {getattr(info, 'oid', '')})"
    )
    return 0
