"""`validity`: coverage counts, realisability and blind baselines of a scenario library."""

from __future__ import annotations

import sys

from casu_dataset.cli.common import check_out_file, error, write_report


def add(sub) -> None:
    p = sub.add_parser(
        "validity", help="coverage counts, realisability and blind baselines of a scenario library"
    )
    p.add_argument(
        "--scenarios",
        default=None,
        help="scenario or family folder/file (default: the shipped CASU-mini v2 families)",
    )
    p.add_argument(
        "--dataset",
        default=None,
        help="a built dataset folder: also check that stems shared by variants are identical",
    )
    p.add_argument("--lm", default="smollm2", help="text LM for the log-likelihood blind baseline")
    p.add_argument(
        "--no-lm", action="store_true", help="skip the LM baseline (it takes a few minutes on CPU)"
    )
    p.add_argument("--out", default=None, help="also write the Markdown report here")
    p.add_argument("--cache", default=None)
    p.add_argument(
        "--strict-cues",
        action="store_true",
        help="with --dataset: an inaudible, untrue or indistinct cue is a violation (exit 1)",
    )
    p.set_defaults(fn=run)


def run(args) -> int:
    from casu_dataset.families.compile import DEFAULT_FAMILY_LIBRARY, is_family_library

    why = check_out_file(args.out, "--out")
    if why:
        error(why)
        return 2

    src = args.scenarios or DEFAULT_FAMILY_LIBRARY
    if is_family_library(src):
        return _family_validity(args, src)
    from casu_dataset.families.blind import (
        BLIND_TARGET,
        coverage,
        format_report,
        realisability,
        run_blind,
    )
    from casu_dataset.legacy.library import compile_library
    from casu_dataset.script.scenes import all_questions
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Embedder, Retriever

    scenes = compile_library(src)
    qs = all_questions(scenes)
    emb = Embedder()
    lm = None
    if not args.no_lm:
        from casu_dataset.core.llm.local import LocalLM

        lm = LocalLM(args.lm)
    blind = run_blind(qs, emb, lm)
    bad = realisability(scenes, Retriever(Catalog.embedded(), emb, cache_dir=args.cache))
    report = format_report(coverage(scenes), blind, bad)
    print(report)
    if args.out and not write_report(args.out, report + "\n", "--out"):
        return 2
    over = [k for k, v in blind.items() if isinstance(v, float) and v > BLIND_TARGET and "length" not in k]
    return 1 if over or bad else 0


def _family_validity(args, src) -> int:
    """Contrast-family invariants (exit 1 naming family and field when one breaks), counts,
    stem identity in a built dataset (--dataset) and the blind baselines."""
    from casu_dataset.dataset.card import DATASET_VERSION
    from casu_dataset.families import validity as fv
    from casu_dataset.families.compile import FamilyError, compile_families
    from casu_dataset.sounds.catalog import Catalog
    from casu_dataset.sounds.retrieval import Embedder, Retriever

    try:
        scenes = compile_families(src)
    except FamilyError as err:  # a broken family is what this command looks for: a finding (1), not bad input
        print(f"validity: {err}", file=sys.stderr)
        return 1
    violations = fv.check_scenes(scenes)
    emb = Embedder()
    retriever = Retriever(Catalog.embedded(), emb, cache_dir=args.cache)
    violations += fv.check_retrieval(scenes, retriever)
    truth = fv.check_type_truth(scenes, retriever)
    built = fv.check_built(args.dataset) if args.dataset else None
    if args.dataset:  # a library family missing from the dataset is a finding, never silence
        violations += fv.check_coverage(args.dataset, scenes)
    blind = fv.embedding_readers(scenes, emb)
    blind.update(fv.length_readers(scenes))
    if not args.no_lm:
        from casu_dataset.core.llm.local import LocalLM

        blind.update(fv.lm_question_only(scenes, LocalLM(args.lm)))
    report = fv.format_report(
        fv.counts(scenes), violations, blind, built, truth, dataset_version=DATASET_VERSION
    )
    cue_failures = []
    if args.dataset and not (built and built[0]):
        from casu_dataset.mix.cue_checks import check_folder, failures, format_summary

        cues = check_folder(args.dataset)
        report += "\n\n" + format_summary(cues["summary"])
        cue_failures = failures(cues["summary"]) if args.strict_cues else []
    print(report)
    if args.out and not write_report(args.out, report + "\n", "--out"):
        return 2
    bad = violations + (built[0] if built else []) + cue_failures
    for v in bad:
        print(f"validity: {v}", file=sys.stderr)
    return 1 if bad else 0
