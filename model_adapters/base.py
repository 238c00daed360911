"""The adapter interface: batches of (16 kHz audio, prompt) in, texts (or option scores) out."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import ClassVar, Literal

import numpy as np

from casu_dataset.core.content_key import content_key
from casu_dataset.core.errors import InputError, ModelError
from casu_dataset.core.redact import protect_url


class AdapterError(ModelError, RuntimeError):
    """A model cannot be loaded or run; the message names the model and what to do. The runner
    stops the run on it (any other error of a request is a failed sample)."""


class ModelArgsError(InputError, ValueError):
    """A --model_args value of the wrong type or out of range, a key the adapter does not take, or
    a replay responses file that cannot be read or lacks an id; the runner stops on it too."""


#: What stops a run at once, where any other error of a request is one failed sample.
STOPS_RUN = (AdapterError, ModelArgsError)


@dataclass(frozen=True)
class GenerationSettings:
    """Greedy by default; every field is recorded with the results."""

    max_new_tokens: int = 128
    do_sample: bool = False
    temperature: float = 0.0
    top_p: float = 1.0
    num_beams: int = 1
    top_k: int | None = None  # None: the model's default

    def to_dict(self) -> dict:
        d = asdict(self)
        if d["top_k"] is None:  # recorded (and part of cache keys) only when set
            del d["top_k"]
        return d

    def check(self) -> "GenerationSettings":
        if self.max_new_tokens < 1:
            raise ValueError(f"generation: max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.do_sample and self.temperature <= 0:
            raise ValueError("generation: do_sample=True needs temperature > 0")
        return self


REQUEST_KINDS = ("answer", "describe")

# How an adapter renders prompts, for `--apply_chat_template` (lm-eval's flag):
#   "always": through a chat template on every request, with or without the flag (audio LMs take
#             their audio placeholder from it; chat APIs and instruct reasoners are chat by nature);
#             a NAME picks one of the adapter's named templates.
#   "never":  no chat template (the random baseline, adapters that do not say); the flag is refused.
ChatTemplateUse = Literal["always", "never"]


@dataclass
class Request:
    """One model call. `audio` is mono float32 at the adapter's sample rate, or None (text only)."""

    prompt: str
    audio: np.ndarray | None = None
    options: list[str] = field(default_factory=list)  # the replies scored by loglikelihood()
    system: str | None = None
    id: str = ""
    kind: str = "answer"  # "answer" (a question, with options or not) | "describe" (an open description)
    task: str = ""  # the harness task name: for logs only, adapters branch on `kind`

    def __post_init__(self):
        if self.kind not in REQUEST_KINDS:
            raise ValueError(f"Request.kind {self.kind!r}: one of {REQUEST_KINDS}")


class Adapter:
    """Subclasses set `name` and implement `generate`; `loglikelihood` is optional.

    Class attributes the harness respects:
      sample_rate         audio is resampled to this before the call
      max_audio_seconds   longer audio is cut (and the sample marked) before the call
      uses_audio          False for text-only baselines: the audio probe is skipped for them
      supports_loglikelihood / prefers_loglikelihood   option scoring instead of parsing text
      chat_template_use / chat_template_how   whether and how prompts go through a chat template
                          (`--apply_chat_template`; see `set_chat_template`)
      concurrency         requests in flight at once (> 1: batches are sent from a thread pool)

    `Request.system` (`--system_instruction`) is the conversation's system turn where the
    adapter has one; it replaces the adapter's own default system prompt.
    """

    name = "adapter"
    version = 1  # bump when the adapter's outputs change for the same inputs (it keys the cache)
    sample_rate = 16000
    max_audio_seconds: float | None = None
    uses_audio = True
    supports_loglikelihood = False
    prefers_loglikelihood = False
    chat_template_use: ClassVar[ChatTemplateUse] = "never"
    chat_template_how = "renders no chat template"  # one line, recorded with the results
    chat_template_name: str | None = None  # a named template chosen with --apply_chat_template NAME
    # Requests the harness keeps in flight at once (API adapters: their `concurrency` argument),
    # whatever --batch_size is; 1 for in-process models, which run one batch at a time.
    concurrency = 1
    # True when the adapter itself holds in-flight requests to `concurrency` (a semaphore): the
    # harness may then queue more, so a request sleeping out a 429 does not leave a slot idle.
    limits_in_flight = False
    # --model_args keys users bring from lm-eval or transformers that this adapter does not take:
    # {key: why}; refused by name (ModelArgsError) before anything loads
    refused_args: ClassVar[dict[str, str]] = {}
    # The config.json `model_type`s of the checkpoints the adapter loads: another is refused before
    # any weights load (registry.check_checkpoint); empty: not checked
    model_types: ClassVar[tuple[str, ...]] = ()
    # The sampling settings (GenerationSettings fields beyond max_new_tokens, do_sample and
    # temperature) the adapter passes to its model; a task or --gen_kwargs setting another is
    # refused by name before anything loads
    sampling_settings: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, **model_args):
        # a URL argument with a key in it (`base_url=...?api_key=K`) is kept as a redact.SecretURL:
        # recorded, logged and hashed (info, fingerprint) masked; `redact.reveal` gives it whole
        self.model_args = {k: protect_url(v) for k, v in model_args.items()}

    def chat_template_names(self) -> list[str]:
        """The named chat templates besides the default that `--apply_chat_template NAME` can pick."""
        return []

    def set_chat_template(self, choice: bool | str | None) -> dict:
        """Apply `--apply_chat_template`: None/False (not given), True (the default template) or a
        template name; returns the effective setting recorded with the results. A ValueError names
        the flag: the adapter renders no chat template, or it has no template of that name."""
        if isinstance(choice, str):
            if not choice.strip():
                raise ValueError(
                    "--apply_chat_template: empty template name; give none (the default template) or a name"
                )
            choice = choice.strip()
        elif choice is not None and not isinstance(choice, bool):
            raise ValueError(f"--apply_chat_template {choice!r}: give true or a template name")
        if choice and self.chat_template_use == "never":
            raise ValueError(
                f"--apply_chat_template: --model {self.name} {self.chat_template_how}; drop the flag"
            )
        if isinstance(choice, str) and choice != "default":
            names = self.chat_template_names()
            if choice not in names:
                raise ValueError(
                    f"--apply_chat_template {choice}: --model {self.name} has no chat template named "
                    f"{choice!r}; available: {', '.join(['default', *names])}"
                )
            self.chat_template_name = choice
        return self.chat_template_setting()

    def chat_template_setting(self) -> dict:
        """What --apply_chat_template means for this adapter, as recorded in the results config."""
        return {
            "apply_chat_template": self.chat_template_use == "always",
            "chat_template_name": self.chat_template_name,
            "chat_template_how": self.chat_template_how,
        }

    def generate(self, requests: list[Request], settings: GenerationSettings) -> list[str]:
        raise NotImplementedError

    def loglikelihood(self, requests: list[Request]) -> list[list[float]]:
        """Per request, one score per option (higher is more likely)."""
        raise AdapterError(
            f"{self.name}: this adapter cannot score options; use generation (--scoring generate)"
        )

    def model_meta(self) -> dict:
        """What the loaded model turned out to be, for lm-eval's config block (model_num_parameters,
        model_dtype, model_revision, model_sha) and the results; {} where it does not apply. Not part
        of the fingerprint: it is known only after loading."""
        return {}

    def chat_template_text(self) -> str | None:
        """The chat template the requests were rendered with (lm-eval's `chat_template`; its sha256
        is `chat_template_sha`), where the adapter has a Jinja template loaded; None otherwise."""
        return None

    def tokenizer_info(self) -> dict:
        """lm-eval's tokenizer fields (tokenizer_pad_token, tokenizer_eos_token, tokenizer_bos_token,
        eot_token_id, max_length) where the adapter has a tokenizer loaded; {} otherwise."""
        return {}

    def info(self) -> dict:
        """What identifies the model's outputs: recorded in results and part of the cache key."""
        d = {
            "adapter": self.name,
            "version": self.version,
            "model_args": {k: str(v) for k, v in sorted(self.model_args.items())},
        }
        if self.chat_template_name:  # only when chosen: the default keeps the cache keys on disk
            d["chat_template"] = self.chat_template_name
        return d

    @property
    def fingerprint(self) -> str:
        return content_key(self.info(), 16)


def parse_pairs(text: str | None, flag: str, error=ValueError) -> dict[str, str]:
    """`k=v,k2=v2` -> {k: v} (strings), refusing a part without `=`, an empty key or a key given
    twice; `flag` names the option in the error (`--model_args`, `--gen_kwargs`, ...)."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise error(f"{flag}: {part.strip()!r} is not key=value")
        k, v = (s.strip() for s in part.split("=", 1))
        if not k:
            raise error(f"{flag}: {part.strip()!r} has an empty key")
        if k in out:
            raise error(f"{flag} {k}: given twice")
        out[k] = v
    return out


def parse_model_args(text: str | None, raw: bool = False) -> dict:
    """`k=v,k2=v2` (lm-eval's --model_args) -> dict with ints, floats and booleans converted
    (`raw=True`: values stay strings, for `check_model_args` to type by the adapter)."""
    pairs = parse_pairs(text, "--model_args", ModelArgsError)
    return pairs if raw else {k: _auto(v) for k, v in pairs.items()}


def _auto(v: str):
    """The untyped guess for keys an adapter takes through **kwargs."""
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            continue
    return v


# Ranges of numeric arguments, by name, whichever adapter takes them: (lowest, lowest allowed itself?).
ARG_RANGES = {
    "seed": (0, True),
    "concurrency": (1, True),
    "max_retries": (0, True),
    "timeout": (0, False),
    "backoff": (0, True),
    "max_new_tokens": (1, True),
    "num_beams": (1, True),
    "temperature": (0, True),
    "top_p": (0, False),
    "batch_size": (1, True),
    "delay": (0, True),
    "rate_limit_wait": (0, True),
    "max_response_bytes": (1, True),
}
_KINDS = {"int": "an integer", "float": "a number", "bool": "true or false", "str": "a string"}


def adapter_params(cls) -> tuple[dict[str, set[str]], bool]:
    """({argument: allowed kinds (int, float, bool, str; empty = unchecked)}, takes other keys?),
    from the __init__ signatures along the class's MRO (a **kwargs __init__ passes keys on)."""
    import inspect

    params: dict[str, set[str]] = {}
    for c in cls.__mro__:
        if c is Adapter or c is object:
            return params, True  # the base stores whatever it is given
        if "__init__" not in c.__dict__:
            continue
        extra = False
        for p in list(inspect.signature(c.__init__).parameters.values())[1:]:
            if p.kind is p.VAR_KEYWORD:
                extra = True
            elif p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in params:
                params[p.name] = _kinds(p.annotation, p.default)
        if not extra:
            return params, False
    return params, True


def _kinds(annotation, default) -> set[str]:
    import inspect

    if annotation is inspect.Parameter.empty:
        t = type(default).__name__ if default not in (inspect.Parameter.empty, None) else ""
        return {t} if t in _KINDS else set()
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    parts = {x.strip() for x in text.replace("Optional[", "").replace("]", "").split("|")} - {"None"}
    return parts if parts <= set(_KINDS) else set()  # list[...], Path, ...: left to the adapter


def _typed(name: str, k: str, v, kinds: set[str]):
    import math

    bad = ModelArgsError(
        f"bad --model_args {k}={v!r}: {name} expects "
        + " or ".join(_KINDS[x] for x in sorted(kinds, key=list(_KINDS).index))
    )
    if not kinds:
        return _auto(v) if isinstance(v, str) else v
    if isinstance(v, str):
        low = v.strip().lower()
        if "bool" in kinds and low in ("true", "false"):
            return low == "true"
        if "int" in kinds:
            try:
                return int(v)
            except ValueError:
                pass
        if "float" in kinds:
            try:
                x = float(v)
            except ValueError:
                x = None
            if x is not None:
                if not math.isfinite(x):
                    raise ModelArgsError(f"bad --model_args {k}={v!r}: {name} needs a finite number")
                return x
        if "str" in kinds:
            return v
        raise bad
    ok = (
        (isinstance(v, bool) and "bool" in kinds)
        or (
            not isinstance(v, bool)
            and (
                (isinstance(v, int) and kinds & {"int", "float"})
                or (isinstance(v, float) and "float" in kinds)
                or (isinstance(v, str) and "str" in kinds)
            )
        )
        or v is None
    )
    if not ok:
        raise bad
    return v


def check_model_args(cls, name: str, args: dict) -> dict:
    """The args typed by the adapter's signature and range-checked, before anything loads;
    ModelArgsError names the key, the value and what the adapter expects."""
    params, extra = adapter_params(cls)
    refused = getattr(cls, "refused_args", {}) or {}
    out = {}
    for k, v in args.items():
        if k in refused and k not in params:
            raise ModelArgsError(f"bad --model_args {k}={v}: {name} does not support it ({refused[k]})")
        if k not in params and not extra:
            raise ModelArgsError(
                f"bad --model_args {k}: {name} takes {', '.join(sorted(params)) or 'no arguments'}"
            )
        # a URL with a key in it (`?api_key=`, `user:pass@`) is recorded, logged and hashed masked;
        # the adapter gets the real one with `redact.reveal`
        v = protect_url(_typed(name, k, v, params.get(k, set())))
        if k in ARG_RANGES and isinstance(v, (int, float)) and not isinstance(v, bool):
            lo, inclusive = ARG_RANGES[k]
            if v < lo or (v == lo and not inclusive):
                raise ModelArgsError(
                    f"bad --model_args {k}={v!r}: {name} needs {k} {'>=' if inclusive else '>'} {lo}"
                )
        out[k] = v
    return out
