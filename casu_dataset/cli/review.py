"""`review --dataset DIR`: serve the human review page for a built dataset."""

from __future__ import annotations

import os

from casu_dataset.cli.common import error, int_in, long_flag


def add(sub) -> None:
    p = sub.add_parser("review", help="serve the human review page for a built dataset")
    p.add_argument("--dataset", required=True, help="a built dataset folder")
    p.add_argument("--port", type=int_in(0, 65535), default=8765, help="TCP port (0: any free one)")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default: this machine only; any other is warned about)",
    )
    p.add_argument("--reviewer", default=os.environ.get("USER", "reviewer"), help="default reviewer name")
    p.set_defaults(fn=run, flag=long_flag)  # serve()'s `dataset` is --dataset


def run(args) -> int:
    from casu_dataset.review.server import serve

    try:
        srv, data = serve(args.dataset, args.host, args.port, args.reviewer)
    except OSError as err:  # the port is taken or the host cannot be bound: a bad --host/--port
        import errno
        import socket

        why = err.strerror or str(err)
        if err.errno == errno.EADDRINUSE:
            error(
                f"--port {args.port}: in use on {args.host}; give another port, or --port 0 for any free one"
            )
        elif isinstance(err, socket.gaierror) or err.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
            error(f"--host {args.host}: cannot listen there ({why})")
        else:
            error(f"--host {args.host} --port {args.port}: cannot listen there ({why})")
        return 2
    host, port = srv.server_address[:2]
    print(
        f"reviewing {args.dataset}: {len(data.scenes)} scenes; decisions go to {data.log.path}\n"
        f"open http://{host}:{port}/  (Ctrl+C stops; nothing is lost)",
        flush=True,
    )
    import signal

    # "Ctrl+C stops" whatever the caller left: a shell starts a background job (`review &` in a
    # script) with SIGINT ignored, and the child would inherit that and never stop on it.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0
