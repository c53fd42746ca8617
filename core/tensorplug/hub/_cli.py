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
        parser.add_argument("--key", action="append", metavar="KEY",
                            help="a trusted public key (ed25519:... or a .pub file): every index read must be signed "
                                 "by one; repeat for several; default: $TENSORPLUG_HUB_TRUSTED_KEYS")
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
    publish.add_argument("--sign", metavar="KEYFILE", help="sign the library's index with this ed25519 private key "
                                                           "(made by 'tensorplug hub keygen')")

    keygen = commands.add_parser("keygen", help="make an ed25519 key pair for signing published indexes")
    keygen.add_argument("keyfile", help="the private key file to write (mode 0600); the public key goes to KEYFILE.pub")

    verify = with_sources(commands.add_parser(
        "verify", help="check a site's signatures and every build file, or every build a lock file records"))
    verify.add_argument("--lock", metavar="FILE", help="check the builds this lock file records")
    verify.add_argument("--cache", metavar="DIR", help="cache directory (default: <tensorplug cache>/hub)")

    vendor = with_sources(commands.add_parser(
        "vendor", help="copy every build a lock file records into a directory that loads with no network"))
    vendor.add_argument("lock", metavar="LOCK", help="the lock file")
    vendor.add_argument("directory", metavar="DIR", help="the directory source to write (load with --source DIR)")
    vendor.add_argument("--cache", metavar="DIR", help="cache directory (default: <tensorplug cache>/hub)")


def run(args) -> int:
    from tensorplug import hub

    try:
        return _COMMANDS[args.hub_command](hub, args)
    except (hub.NoMatchingBuild, ValueError, OSError, ImportError) as exc:  # IntegrityError is a ValueError
        print(f"tensorplug hub {args.hub_command}: {exc}", file=sys.stderr)
        return 1


def _list(hub, args) -> int:
    found = hub.libraries(args.source, trusted_keys=args.key)
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
    selection = hub.select(name, version, source=args.source, lock=args.lock, trusted_keys=args.key)
    print(selection.table())
    return 0 if selection.chosen is not None else 1


def _fetch(hub, args) -> int:
    requirements = args.names or (sorted(hub.read_lock(args.lock)) if args.lock else [])
    if not requirements:
        print("tensorplug hub fetch: name a library, or give --lock", file=sys.stderr)
        return 2
    for requirement in requirements:
        name, version = hub.parse_requirement(requirement, "tensorplug hub fetch")
        selection = hub.select(name, version, source=args.source, lock=args.lock, trusted_keys=args.key)
        path = hub.fetch_selected(selection, source=args.source, lock=args.lock, cache=args.cache)
        build = selection.chosen
        print(f"{name} {build.version} {build.variant} sha256:{build.sha256} {path}")
    return 0


def _lock(hub, args) -> int:
    for name, build in hub.lock(args.output, args.names, source=args.source, trusted_keys=args.key).items():
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
                             gpu_archs=args.gpu_arch, signing_key=args.sign):
        print(f"published {build.name} {build.version} {build.variant} sha256:{build.sha256} "
              f"{args.root.rstrip('/')}/{build.name}/{build.file}")
    return 0


def _keygen(hub, args) -> int:
    public = hub.generate_key(args.keyfile)
    print(f"wrote the private key {args.keyfile} (keep it secret) and the public key {args.keyfile}.pub:\n{public}")
    return 0


def _verify(hub, args) -> int:
    for line in hub.verify_source(args.source, lock=args.lock, trusted_keys=args.key, cache=args.cache):
        print(line)
    return 0


def _vendor(hub, args) -> int:
    source = args.source[0] if args.source and len(args.source) == 1 else args.source
    for name, build in hub.vendor(args.lock, args.directory, source=source, cache=args.cache).items():
        print(f"vendored {name} {build.version} {build.variant} sha256:{build.sha256} into {args.directory}")
    return 0


_COMMANDS = {"list": _list, "explain": _explain, "fetch": _fetch, "lock": _lock, "publish": _publish,
             "keygen": _keygen, "verify": _verify, "vendor": _vendor}


__all__ = ["add_parser", "run"]
