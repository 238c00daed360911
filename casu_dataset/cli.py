"""`python -m casu_dataset COMMAND`: compose, regenerate, demo, retrieval-eval, voices, validity, generate."""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

_T0 = time.perf_counter()  # the build's stage breakdown starts here (imports included)

from .contract import AGENT_DEFAULT_TASKS, mcq_configs

# `push` goes online unless the user set offline mode; every other command reads local files only
_OFFLINE_BY_DEFAULT = not ({"HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"} & set(os.environ))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

EXAMPLES = Path(__file__).parent / "scenarios" / "examples"
EXIT_CODES = """exit codes:
  0  success
  1  the work failed: a build or merge failed, a composed scene was skipped,
     regenerate --check found a different mixture, validity found a violation
  2  bad input: a flag, a file or a folder (the message names which and why)
  3  generate: the LLM server refused the requests (401, 403, 404) or kept failing; replies
     already received stay cached, so re-running resumes
  5  push: the Hub could not be reached (offline, HF_HUB_OFFLINE=1, no route) or refused the upload
     (token, permissions); one line says which. Re-running resumes: files already committed are skipped"""


def _error(msg) -> None:
    """One error line on stderr, with any API key or token in it redacted."""
    from .redact import redact
    print(f"error: {redact(msg)}", file=sys.stderr)


def check_out(path, flag: str = "--out") -> str | None:
    """Why an output folder cannot be written (None when it can): under a regular file, on a
    read-only or virtual filesystem (/proc), a symlink loop. Checked by making the folder and a
    probe file in it, then removing whatever the probe made, so a refused build leaves nothing."""
    import tempfile
    p = Path(path).expanduser()
    try:
        p.resolve(strict=False)
    except (RuntimeError, OSError) as err:  # "Symlink loop" (RuntimeError before Python 3.13)
        return f"{flag} {path}: cannot resolve the path ({err})"
    if p.exists() and not p.is_dir():
        return f"{flag} {path}: is a file, not a folder"
    made = []
    try:
        for a in [*reversed(p.parents), p]:
            if not a.exists():
                if a.is_symlink():
                    return f"{flag} {path}: {a} is a dangling or looping symlink"
                a.mkdir()
                made.append(a)
            elif not a.is_dir():
                return f"{flag} {path}: {a} is a file, not a folder"
        fd, probe = tempfile.mkstemp(dir=p, prefix=".casu-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return f"{flag} {path}: cannot write there ({err.strerror or err})"
    finally:
        for a in reversed(made):
            try:
                a.rmdir()
            except OSError:
                pass
    return None


def _int_in(lo: int, hi: int | None = None):
    """argparse type: an integer in [lo, hi] (argparse names the flag in its error)."""
    def conv(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if v < lo or (hi is not None and v > hi):
            raise argparse.ArgumentTypeError(f"must be >= {lo}, got {v}" if hi is None else
                                             f"must be in {lo}..{hi}, got {v}")
        return v
    return conv


def _float_in(lo: float, hi: float, lo_open: bool = False):
    """argparse type: a finite number in [lo, hi] (or (lo, hi] with lo_open)."""
    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not (v > lo if lo_open else v >= lo) or not v <= hi:  # NaN fails both
            raise argparse.ArgumentTypeError(f"must be > {lo:g} and <= {hi:g}, got {text}" if lo_open else
                                             f"must be in {lo:g}..{hi:g}, got {text}")
        return v
    return conv


def _alphas(text: str) -> list[float]:
    return [_float_in(0.0, 1.0)(a) for a in text.split(",") if a.strip()]


def _scripts(paths: list[str]):
    from .script import load_script
    files = []
    for p in paths:
        p = Path(p)
        files += sorted(p.glob("*.y*ml")) + sorted(p.glob("*.json")) if p.is_dir() else [p]
    return [(f, load_script(f)) for f in files]


def _spec(args) -> dict:
    return {"cache": args.cache, "embedding_model": args.embedding_model, "alpha": args.alpha,
            "check_speech": args.check_speech, "duration": args.duration,
            "catalogs": getattr(args, "catalog", None) or ["embedded"]}


def _builder(args):
    from .realize import make_builder
    return make_builder(_spec(args))


def cmd_compose(args) -> int:
    from .script import ScriptError
    try:
        scripts = _scripts(args.scripts)
    except ScriptError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    why = check_out(args.out)
    if why:
        _error(why)
        return 2
    builder = _builder(args)
    out = Path(args.out)
    failed = 0
    for path, script in scripts:
        t = time.perf_counter()
        try:
            res = builder.build(script, args.seed)
        except Exception as err:  # one bad scene does not stop the others
            failed += 1
            print(f"skip {path}: {type(err).__name__}: {err}", file=sys.stderr)
            continue
        d = res.write(out / script.id)
        a = res.annotation
        print(f"{script.id}: {a['duration']:.1f} s, bed {a['background']['clip_id']}, "
              f"events {[e['clip_id'] for e in a['events']]}, voices "
              f"{ {k: v['id'] for k, v in a['extra']['speech']['voices'].items()} } -> {d} ({time.perf_counter() - t:.1f} s)")
    return 1 if failed else 0


def cmd_regenerate(args) -> int:
    import numpy as np
    from .audio_io import load_audio
    from .bank import bank_dir
    from .mixer import regenerate
    try:
        res = regenerate(args.annotation, search_dirs=[bank_dir() / "audio", *args.search])
    except (ValueError, OSError) as err:  # unreadable, not an annotation, a missing or changed source
        _error(err if str(args.annotation) in str(err) else f"{args.annotation}: {err}")
        return 2
    except (KeyError, TypeError, AttributeError) as err:  # valid JSON of the wrong shape
        _error(f"{args.annotation}: not a CASU scene annotation ({type(err).__name__}: {err})")
        return 2
    if args.out:
        d = res.write(args.out)
        print(f"regenerated {res.annotation['scene_id']} -> {d}")
    if args.check:
        ref = load_audio(args.check)
        same = ref.shape == res.mixture.shape and np.array_equal(ref, res.mixture)
        print(f"{args.check}: {'bit-identical' if same else 'DIFFERENT'}")
        return 0 if same else 1
    return 0


def cmd_demo(args) -> int:
    args.scripts = [str(EXAMPLES)]
    args.check_speech = True
    print(f"demo: composing the example scenes in {EXAMPLES} -> {args.out}")
    rc = cmd_compose(args)
    print(f"demo: wrote {len(list(Path(args.out).glob('*/mixture.wav')))} scenes under {args.out}/ "
          "(mixture.wav, stems/*.wav, annotation.json each)")
    return rc


def cmd_retrieval_eval(args) -> int:
    from .catalog import Catalog
    from .retrieval import Embedder, Retriever
    from .retrieval_eval import DEFAULT_QUERIES, evaluate, format_table, load_queries
    r = Retriever(Catalog.embedded(), Embedder(args.embedding_model), cache_dir=args.cache)
    queries = load_queries(args.queries or DEFAULT_QUERIES)
    alphas = args.alphas
    print(f"{len(queries)} queries against {r.catalog.name} ({len(r.catalog)} clips), model {r.embedder.model_name}")
    print(format_table(evaluate(r, queries, alphas)))
    return 0


def cmd_voices(args) -> int:
    from .speech.intelligibility import DEFAULT_MAX_WER, SENTENCES, WhisperChecker, voice_wer_table
    from .speech.layer import SpeechSynth
    from .speech.voices import VoiceRegistry
    reg = VoiceRegistry().available()
    sentences = SENTENCES[: args.sentences] if args.sentences else SENTENCES
    rows = voice_wer_table(reg, SpeechSynth(args.cache), WhisperChecker(), sentences)
    print("| voice | engine | gender | age | pitch (st) | tempo | WER | kept |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['voice']} | {r['engine']} | {r['gender']} | {r['age']} | {r['pitch_st']:+.2f} | "
              f"{r['tempo']:.3f} | {r['wer']:.3f} | {'yes' if r['wer'] <= DEFAULT_MAX_WER else 'no'} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


def cmd_validity(args) -> int:
    from .scenarios.families import DEFAULT_V2_DIR, is_family_library
    src = args.scenarios or DEFAULT_V2_DIR
    if is_family_library(src):
        return _family_validity(args, src)
    from .catalog import Catalog
    from .retrieval import Embedder, Retriever
    from .scenarios.library import all_questions, compile_library
    from .validity import BLIND_TARGET, coverage, format_report, realisability, run_blind
    scenes = compile_library(src)
    qs = all_questions(scenes)
    emb = Embedder()
    lm = None
    if not args.no_lm:
        from .llm.local import LocalLM
        lm = LocalLM(args.lm)
    blind = run_blind(qs, emb, lm)
    bad = realisability(scenes, Retriever(Catalog.embedded(), emb, cache_dir=args.cache))
    report = format_report(coverage(scenes), blind, bad)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    over = [k for k, v in blind.items() if isinstance(v, float) and v > BLIND_TARGET and "length" not in k]
    return 1 if over or bad else 0


def _family_validity(args, src) -> int:
    """Contrast-family invariants (exit 1 naming family and field when one breaks), counts,
    stem identity in a built dataset (--dataset) and the blind baselines."""
    from . import family_validity as fv
    from .catalog import Catalog
    from .retrieval import Embedder, Retriever
    from .scenarios.families import FamilyError, compile_families
    try:
        scenes = compile_families(src)
    except FamilyError as err:
        print(f"validity: {err}", file=sys.stderr)
        return 1
    violations = fv.check_scenes(scenes)
    emb = Embedder()
    violations += fv.check_retrieval(scenes, Retriever(Catalog.embedded(), emb, cache_dir=args.cache))
    built = fv.check_built(args.dataset) if args.dataset else None
    blind = fv.embedding_readers(scenes, emb)
    blind.update(fv.length_readers(scenes))
    if not args.no_lm:
        from .llm.local import LocalLM
        blind.update(fv.lm_question_only(scenes, LocalLM(args.lm)))
    report = fv.format_report(fv.counts(scenes), violations, blind, built)
    cue_failures = []
    if args.dataset and not (built and built[0]):
        from .cue_checks import check_folder, failures, format_summary
        cues = check_folder(args.dataset)
        report += "\n\n" + format_summary(cues["summary"])
        cue_failures = failures(cues["summary"]) if args.strict_cues else []
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    bad = violations + (built[0] if built else []) + cue_failures
    for v in bad:
        print(f"validity: {v}", file=sys.stderr)
    return 1 if bad else 0


def cmd_audit(args) -> int:
    """Honest-reader packets of the contrast families, and the score of the readers' answers."""
    from . import family_audit as fa
    from .scenarios.families import DEFAULT_V2_DIR, FamilyError, compile_families
    try:
        if args.action == "packets":
            scenes = compile_families(args.scenarios or DEFAULT_V2_DIR)
            fams = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else None
            counts = fa.write_packets(scenes, args.dir, per_packet=args.per_packet, families=fams)
            for name, n in counts.items():
                print(f"{args.dir}/packet_{name}.md: {n} items (reader: READER_{'scene' if name.startswith('scene') else 'views'}.md)")
            print(f"keys: {args.dir}/keys.json (for `audit score` only; never give it to a reader)")
            return 0
        res = fa.score(args.dir)
    except (FamilyError, fa.AuditError) as err:
        print(f"audit: {err}", file=sys.stderr)
        return 2
    report = fa.format_score(res)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return 1 if res["problems"] else 0


def cmd_generate(args) -> int:
    """Agent pipeline: contrast families (--families N; casu_dataset/agents/README.md), or v1
    scenes (--n): script agent -> narrator -> questions -> critic panel."""
    if args.families is not None:
        from .agents.family_cli import generate_main
        return generate_main(args)
    if not args.place:
        print("error: --place is required without --families", file=sys.stderr)
        return 2
    args.place = args.place[0]
    from .agents.pipeline import run_pipeline
    from .cache_layout import llm_responses_file
    from .catalog import Catalog
    from .llm.cache import CachedBackend, ResponseCache
    if args.backend == "local":
        from .llm.backends import LocalBackend
        backend = LocalBackend(args.llm_model or "smollm2")
    else:
        from .llm.backends import OpenAIBackend
        backend = OpenAIBackend(args.base_url, args.llm_model)
    backend = CachedBackend(backend, ResponseCache(llm_responses_file(args.cache)))
    cat = Catalog.embedded()
    types = {k: sorted({c.type for c in cat.clips if c.kind == k}) for k in ("background", "event")}
    out = []
    for i in range(args.n):
        sid = f"gen_{args.place.replace(' ', '_')}_{args.seed}_{i}"
        speech = args.speech_type if args.speech_type != "mixed" else ("monologue", "conversation")[i % 2]
        r = run_pipeline(backend, sid, args.place, types, speech, k=args.k, m=args.m, retries=args.retries)
        out.append({"id": sid, **r.to_dict()})
        print(f"{sid}: script {'ok' if r.script else 'failed'}, kept {len(r.kept)}, rejected {len(r.rejected)}, "
              f"failures {len(r.failures)}")
    Path(args.out).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.out}; cache hits {backend.cache.hits}, misses {backend.cache.misses}")
    return 0


def cmd_build(args) -> int:
    t_cmd = time.perf_counter()
    from .build import BuildError, build_dataset
    from .scenarios.families import DEFAULT_V2_DIR, compile_families, is_family_library
    from .scenarios.library import DEFAULT_DIR, LibraryError, compile_library, library_name
    if args.shard_index >= args.num_shards:
        _error(f"--shard-index {args.shard_index}: must be in 0..{args.num_shards - 1} for --num-shards "
               f"{args.num_shards}")
        return 2
    why = check_out(args.out)
    if why:
        _error(why)
        return 2
    if args.executor != "ray" and (args.ray_address or args.ray_num_gpus is not None):
        _error("--ray-address/--ray-num-gpus: need --executor ray")
        return 2
    if args.ray_num_gpus is not None and args.ray_num_gpus < 0:
        _error(f"--ray-num-gpus {args.ray_num_gpus}: must be >= 0")
        return 2
    if args.executor == "ray":
        try:
            from .ray_executor import require_ray
            require_ray()
        except ImportError as err:
            _error(str(err))
            return 2
    lib = {None: DEFAULT_V2_DIR, "default": DEFAULT_V2_DIR, "v2": DEFAULT_V2_DIR,
           "v1": DEFAULT_DIR}.get(args.scenarios) or Path(args.scenarios)
    if not Path(lib).exists():
        print(f"error: --scenarios {args.scenarios}: no such file or folder", file=sys.stderr)
        return 2
    invalid: list[dict] = []
    try:
        # Contrast families (v2, the default) or v1 scenarios, told apart by their fields.
        scenes = compile_families(lib, invalid) if is_family_library(lib) else compile_library(lib, invalid)
    except LibraryError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    args.check_speech = not args.no_check_speech
    from .catalog import CatalogError
    try:
        builder = _builder(args)
    except (CatalogError, OSError) as err:  # a missing manifest or audio folder, truncated JSON, a bad spec
        _error(f"--catalog: {err}")
        return 2
    from .preflight import fill_problems, rejected_summary
    rej = rejected_summary(builder.retriever.catalog)
    kinds = {c.kind for c in builder.retriever.catalog.clips}
    if not {"background", "event"} <= kinds:  # nothing to retrieve a bed or an event from
        _error(f"--catalog {', '.join(args.catalog or ['embedded'])}: no usable "
               f"{' or '.join(sorted({'background', 'event'} - kinds))} clips "
               f"({len(builder.retriever.catalog)} loaded, {rej['rejected']} rejected: "
               + "; ".join(f"{c['clip_id']}: {c['reason']}" for c in rej["clips"][:3]) + ")")
        return 2
    if rej["rejected"]:
        print(f"catalog {builder.retriever.catalog.name}: {rej['rejected']} clip(s) or row(s) rejected, never used "
              "(listed in the card and build_report.json): " + "; ".join(
                  f"{c['clip_id']}: {c['reason']}" for c in rej["clips"][:5]), file=sys.stderr)
    command = "python -m casu_dataset " + " ".join(sys.argv[1:]) if args.record_command else "python -m casu_dataset build"
    from .build import build_settings
    from .lock import LockError, load_for, lock_path
    spec = _spec(args)
    try:
        lock = None if (args.relock or args.no_lock) else load_for(
            Path(lib), build_settings(builder, args.seed, command), builder.mix_config.model_dump(mode="json"),
            [s.script.id for s in scenes])
    except LockError as err:
        _error(str(err))
        return 2
    if lock is not None:
        builder.lock, spec["lock"] = lock, str(lock.path)
        print(f"following the realization lock {lock.path} ({lock.short}): no retrieval or Whisper decision is made")
    # A followed lock names every clip (checked by hash when used): no retrieval to preflight.
    problems = fill_problems(scenes, builder.retriever, check_retrieval=is_family_library(lib) and lock is None)
    if problems:  # retrieval never falls back silently to a clip of another type
        _error(f"build failed: {len(problems)} fill(s) cannot be built as written; nothing written:\n  "
               + "\n  ".join(problems[:20]))
        return 1
    if args.relock and (args.num_shards > 1 or not args.check_speech):
        _error("--relock: a lock is made from a whole build with the speech checks (no --num-shards, no "
               "--no-check-speech)")
        return 2
    t = time.perf_counter()
    try:
        rep = build_dataset(args.out, scenes, builder, seed=args.seed, cache_dir=args.cache, command=command,
                            num_shards=args.num_shards, shard_index=args.shard_index, num_proc=args.num_proc,
                            invalid=invalid, builder_spec=spec, name=args.name or library_name(lib),
                            relock=Path(lib) if args.relock else None,
                            max_skips=None if args.allow_skips else (args.max_skips or 0),
                            executor=args.executor,
                            ray_options={"address": args.ray_address, "num_gpus": args.ray_num_gpus})
    except BuildError as err:
        print(f"error: build failed: {err}", file=sys.stderr)
        return 1
    except LockError as err:
        _error(f"build failed: {err}")
        return 1
    r = rep.realization_summary()
    if r is not None:
        print(f"realization: {r['reproduced']}/{r['scenes']} scenes reproduced the reference bytes, {r['drifted']} "
              f"drifted (max stem loudness diff {r['max_stem_lufs_diff']:.4f} LU, TTS conformed by at most "
              f"{r['max_turn_samples_conformed']} samples)" + "".join(f"\n  drifted {d}" for d in r["drifted_scenes"][:20]))
    elif rep.lock:
        print(f"wrote the realization lock {lock_path(Path(lib))} ({rep.lock['sha256'][:16]})")
    print(f"dataset identity {(rep.identity or {}).get('sha256', '?')[:16]}")
    print(f"built {len(rep.built)} scenes ({rep.cached} from cache), skipped {len(rep.skipped)} "
          f"in {time.perf_counter() - t:.1f} s: " + ", ".join(f"{k} {v:.1f} s" for k, v in rep.seconds.items()))
    s = rep.seconds
    wall = {"imports": t_cmd - _T0, "setup (library, models, lock)": t - t_cmd,
            "scenes": s.get("prebuild", 0.0), "assemble": s.get("scenes", 0.0) - s.get("prebuild", 0.0),
            "write": s.get("write", 0.0)}
    total = time.perf_counter() - _T0
    print("  wall clock: " + " + ".join(f"{k} {v:.1f} s" for k, v in wall.items())
          + f" = {sum(wall.values()):.1f} s of {total:.1f} s")
    if builder.timings:
        procs = f"summed over {args.num_proc} worker processes" if args.num_proc > 1 else "this process"
        print(f"  scene stages ({procs}): " + ", ".join(f"{k} {v:.1f} s" for k, v in builder.timings.items() if v))
    for s in rep.skipped:
        print(f"  skipped {s['scene_id']}: {s['reason']}")
    print(f"dataset folder: {args.out} (load with datasets.load_dataset({str(args.out)!r}, {mcq_configs()[0]!r}))")
    return 0


def cmd_compare(args) -> int:
    """Per stem: equal bytes, or the largest sample difference (dB re. full scale) and the loudness
    difference; exit 1 when any stem differs."""
    from .lock import compare_folders
    for d in (args.reference, args.build):
        if not (Path(d) / "scenes").is_dir():
            _error(f"{d}: not a built CASU folder (no scenes/ config)")
            return 2
    try:
        rows = compare_folders(Path(args.reference), Path(args.build))
    except ValueError as err:
        _error(str(err))
        return 2
    diff = [r for r in rows if not r["equal"]]
    scenes = {r["scene_id"] for r in rows}
    print(f"{len(scenes)} scenes, {len(rows)} stems: {len(rows) - len(diff)} byte-identical, {len(diff)} differ")
    for r in diff[:50]:
        print(f"  {r['scene_id']} {r['stem']}: " + (f"length {r['length_diff']:+d} samples" if "length_diff" in r else
              f"max sample difference {r['max_diff_db']} dBFS, loudness {r['lufs_diff']:+.4f} LU"))
    return 1 if diff else 0


def cmd_merge(args) -> int:
    from .build import BuildError, merge_folders
    why = check_out(args.out)
    if why:
        _error(why)
        return 2
    for d in args.shards:  # each shard's report names its own problem (merge_folders reads them unchecked)
        f = Path(d) / "build_report.json"
        if not f.is_file():
            continue  # merge_folders says "not a CASU build folder"
        try:
            rep = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            _error(f"merge failed: {f}: not a readable build report ({err})")
            return 1
        missing = [k for k in ("settings", "built", "skipped") if not isinstance(rep, dict) or k not in rep]
        if missing:
            _error(f"merge failed: {f}: not a CASU build report (no {', '.join(missing)})")
            return 1
    try:
        rep = merge_folders(args.out, args.shards)
    except (BuildError, FileNotFoundError, ValueError) as err:
        _error(f"merge failed: {err}")
        return 1
    except (KeyError, TypeError, AttributeError) as err:  # a build_report.json of the wrong shape
        _error(f"merge failed: a shard's build_report.json is not a CASU build report ({type(err).__name__}: {err})")
        return 1
    print(f"merged {len(args.shards)} shards: {len(rep.built)} scenes, {len(rep.skipped)} skipped -> {args.out}")
    return 0


def cmd_push(args) -> int:
    from .hub import HubError, HubUploadError, plan_push, push
    private = not args.public
    try:
        files = plan_push(args.folder)
        if args.dry_run:
            print(f"would upload {len(files)} files of {args.folder} to the {'private' if private else 'public'} "
                  f"dataset repo {args.repo}:")
            print("\n".join(f"  {f}" for f in files))
            return 0
        if _OFFLINE_BY_DEFAULT:  # offline was this module's default, not the user's choice
            os.environ["HF_HUB_OFFLINE"] = os.environ["TRANSFORMERS_OFFLINE"] = "0"
            if "huggingface_hub.constants" in sys.modules:
                sys.modules["huggingface_hub.constants"].HF_HUB_OFFLINE = False
        info = push(args.folder, args.repo, private=private, token=os.environ.get("HF_TOKEN"))
    except HubUploadError as err:  # offline, refused, no route: one line, never the token
        _error(err)
        return 5
    except (HubError, FileNotFoundError) as err:  # a bad --repo or --folder
        _error(err)
        return 2
    print(f"pushed {len(files)} files of {args.folder} -> https://huggingface.co/datasets/{args.repo} "
          f"({'private' if private else 'public'}; {getattr(info, 'oid', '')})")
    return 0


def cmd_review(args) -> int:
    from .review.server import ReviewError, serve
    try:
        srv, data = serve(args.dataset, args.host, args.port, args.reviewer)
    except (ReviewError, OSError) as err:
        _error(err)
        return 2
    host, port = srv.server_address[:2]
    print(f"reviewing {args.dataset}: {len(data.scenes)} scenes; decisions go to {data.log.path}\n"
          f"open http://{host}:{port}/  (Ctrl+C stops; nothing is lost)", flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def cmd_timeline(args) -> int:
    import pyarrow.parquet as pq

    from .audio_io import decode_bytes
    from .review.timeline import timeline_png
    from .audio_io import AudioError
    try:
        rows = pq.read_table(Path(args.dataset) / "scenes", columns=["scene_id", "audio", "annotation"], use_threads=False).to_pylist()
    except (OSError, ValueError) as err:
        _error(f"--dataset {args.dataset}: {err}")
        return 2
    row = next((r for r in rows if r["scene_id"] == args.scene), None)
    if row is None:
        _error(f"--scene {args.scene!r} is not in {args.dataset}")
        return 2
    try:
        audio = decode_bytes((row["audio"] or {}).get("bytes") or b"", f"--scene {args.scene}: audio")
        ann = json.loads(row["annotation"] or "")
        png = timeline_png(audio, ann)
    except AudioError as err:
        _error(err)
        return 2
    except (ValueError, KeyError, TypeError) as err:  # JSONDecodeError is a ValueError
        _error(f"--scene {args.scene}: its annotation is not a CASU annotation ({type(err).__name__}: {err})")
        return 2
    try:
        Path(args.out).write_bytes(png)
    except OSError as err:
        _error(f"--out {args.out}: cannot write it ({err.strerror or err})")
        return 2
    print(f"wrote {args.out}")
    return 0


def _common(p):
    from .script import MAX_SCENE_SECONDS
    p.add_argument("--seed", type=_int_in(0), default=0, help="seed for every random choice (default 0)")
    p.add_argument("--cache", default=None, help="cache folder (default $CASU_CACHE or ~/.cache/casu)")
    p.add_argument("--alpha", type=_float_in(0.0, 1.0), default=0.6,
                   help="matching-score weight of the description (0..1)")
    p.add_argument("--embedding-model", default=None, help="sentence-transformers name or path (default MiniLM)")
    p.add_argument("--duration", type=_float_in(0.0, MAX_SCENE_SECONDS, lo_open=True), default=None,
                   help=f"fixed scene length in s (default: fit, <= {MAX_SCENE_SECONDS:g})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m casu_dataset", description=__doc__, epilog=EXIT_CODES,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("compose", help="build scenes from script files or folders")
    p.add_argument("scripts", nargs="+", help="scene script files (.yaml/.json) or folders")
    p.add_argument("--out", required=True, help="output folder; one sub-folder per scene")
    p.add_argument("--check-speech", action="store_true", help="run the Whisper intelligibility check")
    _common(p)
    p.set_defaults(fn=cmd_compose)
    p = sub.add_parser("regenerate", help="rebuild a scene from its annotation.json")
    p.add_argument("annotation")
    p.add_argument("--out", help="write the regenerated scene here")
    p.add_argument("--check", help="compare with this mixture.wav; exit 1 unless bit-identical")
    p.add_argument("--search", nargs="*", default=[], help="extra folders to look for moved sources")
    p.set_defaults(fn=cmd_regenerate)
    p = sub.add_parser("demo", help="compose the example scenes")
    p.add_argument("--out", default="demo_out")
    _common(p)
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser("retrieval-eval", help="precision@1/@5 of retrieval on a query file")
    p.add_argument("--queries", default=None, help="TSV query file (default: the shipped 160 queries)")
    p.add_argument("--alphas", type=_alphas, default="0,0.25,0.5,0.6,0.75,1", help="comma list of alphas in 0..1")
    p.add_argument("--cache", default=None)
    p.add_argument("--embedding-model", default=None)
    p.set_defaults(fn=cmd_retrieval_eval)
    p = sub.add_parser("voices", help="per-voice WER table over the fixed sentence set")
    p.add_argument("--sentences", type=_int_in(0), default=0, help="use only the first N sentences (0: all)")
    p.add_argument("--json", default=None, help="also write the table as JSON here")
    p.add_argument("--cache", default=None)
    p.set_defaults(fn=cmd_voices)
    p = sub.add_parser("validity", help="coverage counts, realisability and blind baselines of a scenario library")
    p.add_argument("--scenarios", default=None, help="scenario or family folder/file (default: the shipped CASU-mini v2 families)")
    p.add_argument("--dataset", default=None, help="a built dataset folder: also check that stems shared by variants are identical")
    p.add_argument("--lm", default="smollm2", help="text LM for the log-likelihood blind baseline")
    p.add_argument("--no-lm", action="store_true", help="skip the LM baseline (it takes a few minutes on CPU)")
    p.add_argument("--out", default=None, help="also write the Markdown report here")
    p.add_argument("--cache", default=None)
    p.add_argument("--strict-cues", action="store_true",
                   help="with --dataset: an inaudible, untrue or indistinct cue is a violation (exit 1)")
    p.set_defaults(fn=cmd_validity)
    p = sub.add_parser("audit", help="honest-reader packets of the contrast families (one view each, no keys) "
                                     "and the score of the readers' answers")
    p.add_argument("action", choices=["packets", "score"])
    p.add_argument("dir", help="the packet folder (written by `packets`, read by `score`)")
    p.add_argument("--scenarios", default=None, help="family folder/file (default: the shipped CASU-mini v2 families)")
    p.add_argument("--families", default=None, help="packets: only these family ids (comma list)")
    p.add_argument("--per-packet", type=_int_in(1), default=200, help="packets: items per packet file")
    p.add_argument("--out", default=None, help="score: also write the report here")
    p.set_defaults(fn=cmd_audit)
    p = sub.add_parser("build", help="build the dataset folder (parquet + dataset card)")
    p.add_argument("--out", required=True)
    p.add_argument("--scenarios", default="default",
                   help="family or scenario folder/file; 'default' or 'v2': the CASU-mini v2 contrast families; "
                        "'v1': the old CASU-mini scenarios")
    p.add_argument("--num-shards", type=_int_in(1), default=1, help="split the build into N deterministic slices")
    p.add_argument("--shard-index", type=_int_in(0), default=0, help="which slice to build (0..N-1)")
    p.add_argument("--num-proc", type=_int_in(1), default=1, help="worker processes on this machine")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local: this machine (--num-proc); ray: one Ray task per scene or family (pip install "
                        "-e '.[ray]'); the output is byte-identical either way")
    p.add_argument("--ray-address", default=None,
                   help="a running Ray cluster (e.g. HEAD_IP:6379 or 'auto'); default: start a local one")
    p.add_argument("--ray-num-gpus", type=float, default=None,
                   help="GPUs per Ray task (fractions share a GPU); default: 1 when a voice uses a GPU TTS "
                        "engine (kokoro, zonos), else 0")
    p.add_argument("--no-check-speech", action="store_true", help="skip the Whisper intelligibility check")
    lk = p.add_mutually_exclusive_group()
    lk.add_argument("--relock", action="store_true",
                    help="make every decision afresh and write the library's realization lock from this build "
                         "(a new or edited library); by default a library's lock is followed")
    lk.add_argument("--no-lock", action="store_true",
                    help="ignore the library's realization lock: decisions are made on this machine")
    p.add_argument("--record-command", action="store_true", help="write the exact command line into the card")
    p.add_argument("--name", default=None, help="dataset name for the card (default: CASU-mini for the shipped "
                                                  "library, else the scenario folder's or file's name)")
    p.add_argument("--allow-skips", action="store_true", help="write the dataset even when scenes were skipped")
    p.add_argument("--max-skips", type=_int_in(0), default=None,
                   help="write the dataset when at most N scenes were skipped (default 0: any skip fails the build)")
    p.add_argument("--catalog", action="append", default=None,
                   help="sound catalog (repeatable, merged): embedded (default), a manifest.json, "
                        "clotho:CSV:AUDIO_DIR[:META], fsd50k:CSV:AUDIO_DIR or arca23k:CSV:AUDIO_DIR")
    _common(p)
    p.set_defaults(fn=cmd_build)
    p = sub.add_parser("compare", help="how a build's audio differs from a reference build of the same library")
    p.add_argument("reference", help="the reference build folder")
    p.add_argument("build", help="the build to compare")
    p.set_defaults(fn=cmd_compare)
    p = sub.add_parser("merge", help="join shard folders into one dataset")
    p.add_argument("--out", required=True)
    p.add_argument("shards", nargs="+")
    p.set_defaults(fn=cmd_merge)
    p = sub.add_parser("push", help="upload a built dataset folder to the Hugging Face Hub")
    p.add_argument("--repo", required=True, help="ORG/NAME of the dataset repo")
    p.add_argument("--folder", default="casu", help="the built dataset folder")
    vis = p.add_mutually_exclusive_group()
    vis.add_argument("--public", action="store_true", help="create the repo public (default: private)")
    vis.add_argument("--private", action="store_true", help="create the repo private (the default)")
    p.add_argument("--dry_run", action="store_true", help="list the files that would be sent, upload nothing")
    p.set_defaults(fn=cmd_push)
    p = sub.add_parser("review", help="serve the human review page for a built dataset")
    p.add_argument("--dataset", required=True, help="a built dataset folder")
    p.add_argument("--port", type=_int_in(0, 65535), default=8765, help="TCP port (0: any free one)")
    p.add_argument("--host", default="127.0.0.1",
                   help="interface to bind (default: this machine only; any other is warned about)")
    p.add_argument("--reviewer", default=os.environ.get("USER", "reviewer"), help="default reviewer name")
    p.set_defaults(fn=cmd_review)
    p = sub.add_parser("timeline", help="write a scene's timeline picture (spectrogram + labelled spans) as PNG")
    p.add_argument("--dataset", required=True)
    p.add_argument("--scene", required=True)
    p.add_argument("--out", required=True)
    p.set_defaults(fn=cmd_timeline)
    p = sub.add_parser("generate", help="LLM agent pipeline: contrast families (--families N) or v1 scenes, "
                                        "checked by a critic panel")
    p.add_argument("--families", type=int, default=None,
                   help="write N contrast families (FAMILIES.md YAML at --out, votes in OUT.report.json)")
    p.add_argument("--place", action="append", default=None,
                   help="place of the scene (repeat for several; families: default a built-in list)")
    p.add_argument("--shape", default="mixed", choices=["slot", "crossed", "mixed"], help="family shape (--families)")
    p.add_argument("--tasks", default=",".join(AGENT_DEFAULT_TASKS),
                   help="comma-separated tasks, one question each per family (--families)")
    p.add_argument("--n", type=int, default=1, help="v1 scenes to generate (without --families)")
    p.add_argument("--speech-type", default="mixed", choices=["monologue", "conversation", "mixed"])
    p.add_argument("--backend", default="local", choices=["local", "openai"],
                   help="local: a transformers model (default SmolLM2-135M); openai: any OpenAI-compatible server")
    p.add_argument("--llm-model", default=None, help="model name or path (openai: also CASU_LLM_MODEL)")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible base URL (or CASU_LLM_BASE_URL); key from CASU_LLM_API_KEY")
    p.add_argument("--k", type=int, default=3, help="critics in the panel")
    p.add_argument("--m", type=int, default=2, help="critics that must agree with the proposed key")
    p.add_argument("--retries", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--critic-llm-model", action="append", default=None,
                   help="critic model(s), comma-separated or repeated; seat j uses model j mod count "
                        "(default: the writer's model)")
    p.add_argument("--critic-base-url", default=None, help="OpenAI-compatible base URL of the critics (default --base-url)")
    p.add_argument("--critic-temperature", type=float, default=0.7,
                   help="critics sample, so seats that share a model vote independently")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight per server (--families)")
    p.add_argument("--max-tokens", type=int, default=None, help="cap on every reply's tokens (default: per agent)")
    p.add_argument("--retrieval", action=argparse.BooleanOptionalAction, default=True,
                   help="check that each fill retrieves its bank type (--families)")
    p.add_argument("--out", required=True, help="families: YAML file (+ OUT.report.json); v1: JSON file of scenes, "
                                                "kept/rejected questions and votes")
    p.add_argument("--cache", default=None, help="folder of the LLM response cache (resume after a kill)")
    p.set_defaults(fn=cmd_generate)
    args = ap.parse_args(argv)
    from .redact import guard_logging
    guard_logging()
    return _run(args)


def _run(args) -> int:
    """The command, with the errors of whole classes of bad input mapped to one named line each:
    a file that is not what it claims (a catalog, a scenario or script file) is exit 2, an LLM
    server that refuses or keeps failing is exit 3; never a traceback, never a key fragment."""
    from .catalog import CatalogError
    from .llm.backends import BackendError
    from .scenarios.library import LibraryError
    from .script import ScriptError
    try:
        return args.fn(args)
    except (CatalogError, LibraryError, ScriptError) as err:
        _error(err)
        return 2
    except BackendError as err:
        _error(f"{args.cmd}: the LLM server refused the requests or kept failing (replies received stay "
               f"cached; rerun to resume): {err}")
        return 3


if __name__ == "__main__":
    sys.exit(main())
