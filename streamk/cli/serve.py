"""``streamk serve``: the HTTP API and web page over an index."""

from .options import existing_folder, non_negative_int, port_number, positive_float, positive_int


def _serve(args):
    from ..server import serve

    return serve(args.dir, host=args.host, port=args.port, workers=args.workers, token_file=args.token_file,
                 cors=args.cors or (), dask=args.dask, max_upload=int(args.max_upload * (1 << 20)),
                 images=args.images or (), max_requests=args.max_requests, show_paths=args.show_paths,
                 limits={"max_uploads": args.max_uploads, "body_timeout": args.body_timeout,
                         "min_body_rate": args.min_body_rate * 1024, "request_timeout": args.request_timeout},
                 connection_limits={"header_timeout": args.header_timeout,
                                    "keep_alive_timeout": args.keep_alive_timeout,
                                    "max_connections": args.max_connections,
                                    "max_connections_per_client": args.max_connections_per_client},
                 backup_dir=args.backup_dir)


def add_serve_command(sub):
    sv = sub.add_parser("serve", help="an HTTP API and a web page over an index (search by photo, id or vector; "
                                      "add, update, delete images)",
                        allow_abbrev=False)  # '--token SECRET' must not pass for --token-file
    sv.add_argument("dir", help="index directory")
    sv.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    sv.add_argument("--port", type=port_number, default=8000, help="port, 0..65535 (default 8000)")
    sv.add_argument("--workers", type=positive_int, default=2,
                    help="processes that extract and encode uploaded photos (default 2)")
    sv.add_argument("--token-file", default=None, metavar="FILE",
                    help="file holding the token that writes (and then reads) need; or set STREAMK_TOKEN. "
                         "Without one the server is read-only")
    sv.add_argument("--cors", action="append", default=None, metavar="ORIGIN",
                    help="allow browser pages of this origin (e.g. https://example.org) to call the API; "
                         "repeatable (default: none)")
    sv.add_argument("--dask", default=None, metavar="ADDRESS",
                    help="a sharded index: its shards' owners on this Dask cluster")
    sv.add_argument("--images", action="append", type=existing_folder, default=None, metavar="DIR",
                    help="the collection folder the index was ingested from: thumbnails of its images are made "
                         "from these files (repeatable; nothing outside them is read)")
    sv.add_argument("--show-paths", action="store_true",
                    help="include the metadata fields path and folder (where ingestion found each file on this "
                         "machine) in answers; default: hidden (filters may use them either way)")
    sv.add_argument("--max-upload", type=positive_float, default=20.0, metavar="MB",
                    help="largest request body accepted, in MB (default 20)")
    sv.add_argument("--max-requests", type=positive_int, default=64, metavar="N",
                    help="requests answered at once; one more gets 503 busy (default 64)")
    sv.add_argument("--max-uploads", type=positive_int, default=8, metavar="N",
                    help="uploads (photos, writes) answered at once, in slots apart from --max-requests so that "
                         "slow uploads never hold up searches; one more gets 503 busy (default 8)")
    sv.add_argument("--header-timeout", type=positive_float, default=10.0, metavar="S",
                    help="seconds a client has to send a request's headers; then the connection is closed (default 10)")
    sv.add_argument("--body-timeout", type=positive_float, default=10.0, metavar="S",
                    help="seconds between two parts of a request body; then 408 body_timeout (default 10)")
    sv.add_argument("--min-body-rate", type=positive_float, default=64.0, metavar="KB/S",
                    help="the least rate of a whole request body, in KiB/s, beyond --body-timeout: a 20 MiB body may "
                         "take 10 + 320 s (default 64)")
    sv.add_argument("--request-timeout", type=positive_float, default=300.0, metavar="S",
                    help="seconds from a request's headers to its answer; then 503 timeout (default 300)")
    sv.add_argument("--keep-alive-timeout", type=positive_int, default=5, metavar="S",
                    help="seconds an idle kept-alive connection stays open (default 5)")
    sv.add_argument("--max-connections", type=positive_int, default=512, metavar="N",
                    help="connections at once; a request on one more is answered 503 (default 512)")
    sv.add_argument("--max-connections-per-client", type=non_negative_int, default=64, metavar="N",
                    help="connections open at once from one client address, so that one client cannot take all of "
                         "--max-connections; one more is closed at once (default 64). 0: no cap, for a server "
                         "behind a reverse proxy, where every client has the proxy's address")
    sv.add_argument("--backup-dir", default=None, metavar="DIR",
                    help="folder where POST /backup writes backups of the index (named by the server; default: "
                         "no backups)")
    sv.set_defaults(func=_serve)
