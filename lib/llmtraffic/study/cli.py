"""``python -m llmtraffic.study {list,run,plan,data,gallery,bench,verdicts,rejudge,verify}``.

Exit status of ``run``: 0 all notebooks succeeded; 1 a notebook failed; 2 a setting that can
never work (unknown profile or parameter, wrong type or range, malformed YAML, unknown LLM
backend, a key given twice, uncommitted code without --allow-dirty); 3 a resource the settings ask for is missing here (an unreachable
LLM endpoint, a backbone without local weights or GPU), and nothing was executed; or data that
could not be fetched, and the notebooks that need no such data ran (the summary lists the skipped ones).
Exit status of ``plan``: 0 printed (nothing runs); 2 a setting that can never work, or, with
``--gpu-gib``, one whose predicted peak GPU memory exceeds that GPU.
Exit status of ``data``: 0 the data directory is complete; 1 files are missing (``--keep-going``: 0).
Exit status of ``bench``: 0 every benchmark succeeded; 1 one failed or ran past its limit (the
others still ran, and the page shows which); 2 a setting that can never work (a malformed
``BENCH_*`` declaration, no benchmark matched, the page lacks its markers), and nothing ran.
Exit status of ``verify``: 0 the outputs under figures/ come from one code version, none from
uncommitted code; 1 they do not (the offending notebooks are listed); 2 no git history to check against.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import bench, claims, data, findings, gallery, provenance, runner, verify
from . import plan as study_plan
from .params import DEFAULT_PROFILE, PROFILES, ParamError, load_profile, merge_settings, notebook_parameters
from .paths import ROOT, data_dir, figures_dir
from .preflight import ResourceError


def _list(args) -> int:
    for nb in runner.discover(args.notebooks):
        declared = notebook_parameters(nb)
        profiles = [p for p in PROFILES if (args.params / nb.stem / f"{p}.yaml").exists()]
        print(f"{nb.stem}  (profiles: {', '.join(profiles) or 'defaults only'})")
        for name, par in declared.items():
            overrides = {p: load_profile(args.params, nb.stem, p).get(name) for p in profiles}
            shown = " ".join(f"{p}={v!r}" for p, v in overrides.items() if v is not None)
            print(f"    {name} = {par.default!r}" + (f"   [{shown}]" if shown else "") + (f"  # {par.help}" if par.help else ""))
    return 0


def _run(args) -> int:
    if args.allow_dirty:
        os.environ[provenance.ALLOW_DIRTY] = "1"  # papermill's kernels inherit it
    try:
        outcomes = runner.run(
            args.profile, args.notebooks, args.params, args.only, merge_settings(args.params_file, args.set),
            args.jobs, args.fail_fast, args.fresh, timeout_s=args.timeout, first=args.first,
        )
    except ParamError as err:
        print(f"error: {err}\nNothing was executed.", file=sys.stderr)
        return 2
    except provenance.DirtyTreeError as err:
        print(f"error: {err}\nNothing was executed.", file=sys.stderr)
        return 2
    except ResourceError as err:
        print(f"error: missing here:\n{err}\nNothing was executed.", file=sys.stderr)
        return 3
    failed = [o for o in outcomes if not o.ok and not o.skipped]
    skipped = [o for o in outcomes if o.skipped]
    print(f"{len(outcomes) - len(failed) - len(skipped)} of {len(outcomes)} notebooks succeeded"
          + (f", {len(skipped)} skipped" if skipped else "") + f"; figures: {gallery.write()}")
    for o in failed:
        print(f"FAILED {o.error} (executed notebook: {o.output})", file=sys.stderr)
    for o in skipped:
        print(f"SKIPPED {o.error}", file=sys.stderr)
    return 1 if failed else 3 if skipped else 0


def _plan(args) -> int:
    if args.gpu_gib:
        os.environ[study_plan.GPU_ENV] = str(args.gpu_gib)
    try:
        notebooks = runner.discover(args.notebooks, args.only)
        plans = runner.plan(notebooks, args.profile, args.params, merge_settings(args.params_file, args.set), check=False)
    except ParamError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    texts = [t for p in plans for t in study_plan.describe(p.stem, p.full)]
    print("\n\n".join(texts) or f"no notebook of profile {args.profile} fine-tunes a backbone on a GPU")
    refused = [f"{p.stem}: {r.splitlines()[0]}" for p in plans for r in study_plan.refusals(p.stem, p.full)]
    for line in refused:
        print(f"error: {line}", file=sys.stderr)
    return 2 if refused else 0


def _data(args) -> int:
    if args.check:
        problems = data.check()
        for p in problems:
            print(p)
        print("data directory complete" if not problems else f"{len(problems)} problems in {data_dir()}; run `make data`")
        return 1 if problems else 0
    report = data.ensure()
    if report.missing:
        print(report.problem(), file=sys.stderr)
        return 0 if args.keep_going else 1
    print(report.summary())
    return 0


def _bench(args) -> int:
    doc = None if args.only or args.no_write else args.doc
    try:
        results = bench.run(args.benchmarks, doc, args.only, args.timeout)
    except bench.BenchError as err:
        print(f"error: {err}\nNothing was run.", file=sys.stderr)
        return 2
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)} of {len(results)} benchmarks succeeded; "
          + (f"written into {doc}" if doc else "no page written (--only or --no-write)"))
    for r in failed:
        print(f"FAILED {r.spec.path.name}: {r.status}" + (f": {r.stderr[-1]}" if r.stderr else ""), file=sys.stderr)
    return 1 if failed else 0


def _verify(args) -> int:
    try:
        report = verify.verify(args.figures)
    except verify.NoHistoryError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(report.text(), file=sys.stdout if report.ok else sys.stderr)
    return 0 if report.ok else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m llmtraffic.study", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--notebooks", type=Path, default=ROOT / "notebooks", help="folder of notebooks")
    parser.add_argument("--params", type=Path, default=ROOT / "params", help="folder of params/<stem>/<profile>.yaml")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="notebooks, their profiles and parameters")
    run = sub.add_parser("run", help="execute notebooks with papermill")
    run.add_argument("--profile", default=DEFAULT_PROFILE, help=f"one of {', '.join(PROFILES)} (default {DEFAULT_PROFILE})")
    # action="extend": a repeated flag adds to the earlier ones instead of replacing them
    run.add_argument("--only", nargs="+", action="extend", metavar="GLOB", help="run only notebooks whose stem matches")
    run.add_argument("--first", nargs="+", action="extend", metavar="GLOB",
                     help="start notebooks whose stem matches first, in this order (the longest ones bound the wall time)")
    run.add_argument("--jobs", type=int, default=runner.DEFAULT_JOBS,
                     help=f"notebooks run at once (default {runner.DEFAULT_JOBS}: this machine's cores, at most 4)")
    run.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                     help="override parameters (YAML values); repeatable, merged with --params-file")
    run.add_argument("-f", "--params-file", action="append", default=[], type=Path, metavar="FILE",
                     help="a YAML mapping of parameter overrides; repeatable; a key given twice is an error")
    run.add_argument("--fail-fast", action="store_true", help="stop after the first failing notebook")
    run.add_argument("--fresh", action="store_true", help="ignore cached artifacts (retrain)")
    run.add_argument("--allow-dirty", action="store_true",
                     help="save into figures/ from uncommitted lib/, notebooks/ or params/ (outputs are marked)")
    run.add_argument("--timeout", type=float, default=None, help="seconds before a notebook is killed")
    pl = sub.add_parser("plan", help="predicted GPU memory and hours of each notebook's fine-tunes; runs nothing")
    pl.add_argument("--profile", default=DEFAULT_PROFILE, help=f"one of {', '.join(PROFILES)} (default {DEFAULT_PROFILE})")
    pl.add_argument("--only", nargs="+", action="extend", metavar="GLOB", help="plan only notebooks whose stem matches")
    pl.add_argument("--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE", help="as for run")
    pl.add_argument("-f", "--params-file", action="append", default=[], type=Path, metavar="FILE", help="as for run")
    pl.add_argument("--gpu-gib", type=float, default=None, help="check the fit on a GPU of this many GiB (exit 2 if not)")
    check = sub.add_parser("data", help="download the public data sets into $LLMTRAFFIC_DATA")
    check.add_argument("--check", action="store_true", help="only verify presence and checksums")
    check.add_argument("--keep-going", action="store_true",
                       help="exit 0 when files cannot be fetched (make test: the tests that need no data still run)")
    sub.add_parser("gallery", help="regenerate figures/README.md")
    b = sub.add_parser("bench", help="run benchmarks/*.py to the end; write their output into docs/performance.md")
    b.add_argument("--benchmarks", type=Path, default=bench.BENCHMARKS, help="folder of benchmark scripts")
    b.add_argument("--doc", type=Path, default=bench.DOC, help="page whose generated section is replaced")
    b.add_argument("--only", nargs="+", action="extend", metavar="GLOB",
                   help="run only benchmarks whose stem matches (the page is then left as it was)")
    b.add_argument("--timeout", type=float, default=None,
                   help=f"seconds per benchmark, for all of them (default: each one's BENCH_TIMEOUT_S, else {bench.DEFAULT_TIMEOUT_S:g})")
    b.add_argument("--no-write", action="store_true", help="only run and print")
    verdicts = sub.add_parser("verdicts", help="claims whose verdict changed between a commit and figures/")
    verdicts.add_argument("--before", default="main", help="git ref of the earlier claims (default main)")
    verdicts.add_argument("--after", type=Path, default=None, help="figures folder of the later claims (default figures/)")
    rejudge = sub.add_parser("rejudge", help="re-derive every verdict from the stored per-run values (no simulation); "
                             "rewrite figures/*/claims.json, the scorecard and the README's findings")
    rejudge.add_argument("--figures", type=Path, default=None, help="figures folder (default figures/; the README only for it)")
    ver = sub.add_parser("verify", help="check that figures/ holds the outputs of one committed code version")
    ver.add_argument("--figures", type=Path, default=None, help="figures folder (default figures/)")
    args = parser.parse_args(argv)
    if args.command == "gallery":
        print(gallery.write())
        if figures_dir().resolve() == (ROOT / "figures").resolve():
            gallery.update_readme()
        return 0
    if args.command == "rejudge":
        print(claims.changed_text(claims.rejudge(args.figures)), end="")
        if args.figures is None:
            print(findings.update_readme())
        return 0
    if args.command == "verdicts":
        print(claims.changed_text(claims.changed(claims.load_commit(args.before), claims.load(args.after))), end="")
        return 0
    return {"list": _list, "run": _run, "plan": _plan, "data": _data, "bench": _bench, "verify": _verify}[args.command](args)
