"""``tensorplug hub``: list, explain, fetch, lock and publish kernel library builds."""

from __future__ import annotations

import argparse
import sys

SOURCE_HELP = ("a directory, an http(s):// URL of a published layout, or 'installed' (distributions declaring "
               "kernels); repeat for several; default: installed")


def add_parser(sub) -> None:
    """Add the ``hub`` command and its subcommands to the ``tensorplug`` parser."""
    hub = sub.add_parser("hub", help="load kernel libraries by name: the right build for this machine (docs/hub.md)",
                         description="Kernel library builds keyed on tensorplug's ABI, CPU and GPU, not on a "
                                     "framework version.")
    commands = hub.add_subparsers(dest="hub_command", required=True)

    def with_sources(parser):
        parser.add_argument("--source", action="append", metavar="SOURCE", help=SOURCE_HELP)
        return parser

    listing = with_sources(commands.add_parser("list", help="list the libraries of the sources and their builds"))
    listing.add_argument("name", nargs="?", help="only this library (org/name)")

    explain = with_sources(commands.add_parser(
        "explain", help="show which build of a library loads here, and why every other one does not"))
    explain.add_argument("name", metavar="NAME[==VERSION]", help="the library, e.g. org/kernels or org/kernels==1.2.0")
    explain.add_argument("--lock", metavar="FILE", help="explain the build this lock file records")

    fetch = with_sources(commands.add_parser(
        "fetch", help="download and verify the chosen builds into the cache; print their paths"))
    fetch.add_argument("names", nargs="*", metavar="NAME[==VERSION]",
                       help="libraries (default with --lock: all it locks)")
    fetch.add_argument("--lock", metavar="FILE", help="fetch exactly the builds this lock file records")
    fetch.add_argument("--cache", metavar="DIR", help="cache directory (default: <tensorplug cache>/hub)")

    lock = with_sources(commands.add_parser("lock", help="write a lock file recording the builds chosen here"))
    lock.add_argument("names", nargs="+", metavar="NAME[==VERSION]", help="libraries to lock")
    lock.add_argument("-o", "--output", required=True, metavar="FILE", help="the lock file to write")

    publish = commands.add_parser("publish", help="add built libraries to a published layout (a directory)")
    publish.add_argument("root", help="the layout's root directory (created if needed); serve it as static files")
    publish.add_argument("name", help="the library's name, org/name")
    publish.add_argument("version", help="the library's version, e.g. 1.2.0")
    publish.add_argument("--build", action="append", required=True, metavar="ISA=PATH",
                         help="a library built for an ISA level (x86-64, x86-64-v2, x86-64-v3, x86-64-v4, armv8-a, "
                              "armv8.2-a, armv9-a); repeat for each")
    publish.add_argument("--cuda", metavar="X.Y", help="the builds hold CUDA code built with this CUDA version")
    publish.add_argument("--rocm", metavar="X.Y", help="the builds hold ROCm code built with this ROCm version")
    publish.add_argument("--gpu-arch", action="append", default=[], metavar="ARCH",
                         help="a GPU architecture the builds hold code for (sm_90, compute_90, gfx90a); repeat")


def run(args) -> int:
    from tensorplug import hub

    try:
        return _COMMANDS[args.hub_command](hub, args)
    except (hub.NoMatchingBuild, ValueError, OSError) as exc:  # IntegrityError is a ValueError
        print(f"tensorplug hub {args.hub_command}: {exc}", file=sys.stderr)
        return 1


def _list(hub, args) -> int:
    found = hub.libraries(args.source)
    if args.name:
        found = {args.name: found.get(args.name, [])}
    for name, builds in found.items():
        print(f"{name}: {len(builds)} build{'s' * (len(builds) != 1)}")
        for b in builds:
            gpu = f" ({','.join(b.gpu_archs)})" if b.gpu_archs else ""
            print(f"  {b.version}  abi {b.abi}  {b.os} {b.variant}{gpu}  sha256 {b.sha256[:12]}  {b.source}")
    return 0


def _explain(hub, args) -> int:
    name, version = hub.parse_requirement(args.name, "tensorplug hub explain")
    selection = hub.select(name, version, source=args.source, lock=args.lock)
    print(selection.table())
    return 0 if selection.chosen is not None else 1


def _fetch(hub, args) -> int:
    requirements = args.names or (sorted(hub.read_lock(args.lock)) if args.lock else [])
    if not requirements:
        print("tensorplug hub fetch: name a library, or give --lock", file=sys.stderr)
        return 2
    for requirement in requirements:
        name, version = hub.parse_requirement(requirement, "tensorplug hub fetch")
        selection = hub.select(name, version, source=args.source, lock=args.lock)
        path = hub.fetch_selected(selection, source=args.source, lock=args.lock, cache=args.cache)
        build = selection.chosen
        print(f"{name} {build.version} {build.variant} sha256:{build.sha256} {path}")
    return 0


def _lock(hub, args) -> int:
    for name, build in hub.lock(args.output, args.names, source=args.source).items():
        print(f"locked {name} {build.version} {build.variant} sha256:{build.sha256} from {build.source}")
    return 0


def _publish(hub, args) -> int:
    variants = {}
    for item in args.build:
        isa, sep, path = item.partition("=")
        if not sep or not isa or not path:
            print(f"tensorplug hub publish: --build: expected ISA=PATH, got {item!r}", file=sys.stderr)
            return 2
        variants[isa] = path
    for build in hub.publish(args.root, args.name, args.version, variants, cuda=args.cuda, rocm=args.rocm,
                             gpu_archs=args.gpu_arch):
        print(f"published {build.name} {build.version} {build.variant} sha256:{build.sha256} "
              f"{args.root.rstrip('/')}/{build.name}/{build.file}")
    return 0


_COMMANDS = {"list": _list, "explain": _explain, "fetch": _fetch, "lock": _lock, "publish": _publish}


__all__ = ["add_parser", "run"]
