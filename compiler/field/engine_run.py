"""Run a plan's deployment on a real vLLM server: a local model folder, the launch command, start and stop.

Entry points:
  * ``build_model_dir(path, **arch)``: a Llama-architecture ``config.json`` and a word-level tokenizer made
    locally (no download); vLLM serves it with ``--load-format dummy`` (random weights: real kernels, real
    scheduler, real batching and paged KV, so real timings; the text is noise);
  * ``server_command(plan, deployment, model_dir, ...) -> (argv, env)``: the ONE place a plan deployment
    becomes a vLLM command line. It takes the plan's ``engine_args`` as they are and adds only what depends
    on the local model folder and the server's machine (model folder, address, context length, the CPU
    engine's KV size), so the deployment served is the one the plan states;
  * ``start_server(argv, env, log)`` / ``wait_ready(proc, url, timeout_s)`` / ``stop_server(proc)``: a server
    process in its own session, stopped by its pid (its process group: vLLM starts an engine-core child).

Why the KV size is an environment variable: vLLM's CPU backend ignores ``--gpu-memory-utilization`` and sizes
its KV cache from ``VLLM_CPU_KVCACHE_SPACE`` (whole GiB); the plan's ``kv_cache_tokens`` (what the cost model
computed from the device profile's memory) is converted to GiB here, rounded down, so the server never holds
more KV than the plan assumed.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from trimtab.errors import InputError, Problem
from trimtab.contract.schema import Deployment, Plan
from trimtab.cost.model import BYTES
from trimtab.engines.base import engine_table
from trimtab.profiles.loader import model_from_hf_config

# A ~57 M-parameter Llama (8 layers, hidden 768, 12 heads, 4 KV heads, MLP 2048, vocab 4096): big enough that
# the GEMMs, not Python, dominate a prefill step on a CPU, small enough that a 2-core machine serves ~1
# request/s.
SMALL_LLAMA = {"hidden_size": 768, "intermediate_size": 2048, "num_hidden_layers": 8,
               "num_attention_heads": 12, "num_key_value_heads": 4, "vocab_size": 4096,
               "max_position_embeddings": 2048}


def build_model_dir(path: str | Path, **arch) -> Path:
    """Write ``config.json`` (LlamaForCausalLM, ``SMALL_LLAMA`` updated by ``arch``) and a word-level
    tokenizer of ``vocab_size`` words (``w3`` ... plus ``<unk>``, ``<s>``, ``</s>``) into ``path``; needs
    ``tokenizers`` and ``transformers`` (installed with vLLM)."""
    try:
        from tokenizers import Tokenizer, models, pre_tokenizers
        from transformers import PreTrainedTokenizerFast
    except ImportError as exc:
        raise InputError([Problem("model folder", f"needs the tokenizers and transformers packages ({exc}); "
                                                  "they come with vLLM")]) from None
    cfg = dict(SMALL_LLAMA)
    unknown = sorted(set(arch) - set(cfg))
    if unknown:
        raise InputError([Problem("model folder", f"unknown architecture field(s) {unknown}; "
                                                  f"known: {sorted(cfg)}")])
    cfg.update(arch)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2} | {f"w{i}": i for i in range(3, cfg["vocab_size"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>").save_pretrained(str(out))
    cfg.update({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0, "torch_dtype": "bfloat16", "bos_token_id": 1, "eos_token_id": 2,
                "tie_word_embeddings": False, "hidden_act": "silu"})
    (out / "config.json").write_text(json.dumps(cfg, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return out


def _kv_bytes_per_token(model_dir: Path, dtype: str) -> float:
    """KV bytes per token of context from the folder's config.json, by the cost model's own formula."""
    m = model_from_hf_config(model_dir / "config.json", model_dir.name)
    return 2 * m.num_layers.value * m.num_kv_heads.value * m.head_dim.value * BYTES[dtype]


def context_len(plan: Plan, deployment: Deployment, model_ctx: int) -> int:
    """The longest prompt + output the plan routes to ``deployment`` (its buckets' maxima), at most the
    model's context window: vLLM's ``--max-model-len`` (without it vLLM reserves the model's whole window)."""
    longest = 0
    for r in plan.routes:
        if deployment.name not in (r.deployment, r.prefill, r.decode):
            continue
        for b in plan.buckets.get(r.workload, []):
            if b.name == r.bucket:
                longest = max(longest, b.input_tokens_max + b.output_tokens_max)
    return min(longest or model_ctx, model_ctx)


def _plan_args(dep: Deployment) -> list[str]:
    """The plan's engine arguments less those this function sets itself for a local server (address, model
    folder's dtype and name, the context it measures): the plan's command targets a cluster
    (docs/deploy.md)."""
    fl = engine_table("vllm")["flags"]
    own = {fl[k] for k in ("host", "port", "dtype", "context", "served_name", "revision")}
    return [a for a in dep.engine_args if a.split("=", 1)[0] not in own]


def server_command(plan: Plan, deployment: Deployment | str, model_dir: str | Path, *,
                   host: str = "127.0.0.1", port: int = 8000, device: str = "cpu", python: str | None = None,
                   threads: int = 1, threads_bind: str = "nobind",
                   min_context: int = 0) -> tuple[list[str], dict[str, str]]:
    """The vLLM OpenAI server command (argv) and the environment variables it needs for one replica of
    ``deployment``. ``device`` ``cpu`` (vllm-cpu: KV size from the plan via VLLM_CPU_KVCACHE_SPACE;
    ``threads`` OpenMP threads, as many as the device profile was measured with (``OMP_NUM_THREADS`` of
    ``trimtab bench``), ``threads_bind`` vLLM's core list, or ``nobind`` to let the OS place them on a machine
    shared with other processes) or ``cuda``. ``min_context``: admit at least this many tokens per request (an
    engine fit measures shapes longer than the plan routes)."""
    dep = deployment
    if isinstance(dep, str):
        dep = next((d for d in plan.deployments if d.name == deployment), None)
        if dep is None:
            raise InputError([Problem("deployment", f"{deployment!r} is not in the plan "
                                                    f"({', '.join(d.name for d in plan.deployments)})")])
    md = Path(model_dir)
    if not (md / "config.json").is_file():
        raise InputError([Problem("model folder", "no config.json", str(md))])
    if device not in ("cpu", "cuda"):
        raise InputError([Problem("--device", f"must be cpu or cuda, got {device!r}")])
    cfg = json.loads((md / "config.json").read_text(encoding="utf-8"))
    model_ctx = int(cfg.get("max_position_embeddings") or 4096)
    ctx = min(max(context_len(plan, dep, model_ctx), min_context), model_ctx)
    argv = [python or sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(md),
            "--load-format", "dummy", "--host", host, "--port", str(port),
            "--dtype", {"bf16": "bfloat16", "fp32": "float32"}.get(dep.dtype, "auto"),
            f"--max-model-len={ctx}",
            *_plan_args(dep)]
    if dep.prefix_cache_tokens == 0:
        argv.append("--no-enable-prefix-caching")  # the plan assumed no prefix reuse; random prompts get none
    env: dict[str, str] = {}
    if device == "cpu":
        kv_dtype = dep.kv_dtype or ("fp8" if dep.dtype in ("fp8", "fp4") else dep.dtype)
        gib = dep.kv_cache_tokens * _kv_bytes_per_token(md, kv_dtype) / 2**30
        env["VLLM_CPU_KVCACHE_SPACE"] = str(max(1, int(gib)))
        env["OMP_NUM_THREADS"] = str(threads)
        env["VLLM_CPU_OMP_THREADS_BIND"] = threads_bind
    return argv, env


def start_server(argv: list[str], env: dict[str, str], log_path: str | Path) -> subprocess.Popen:
    """Start the server in its own session (so ``stop_server`` can end it and its children by its pid)."""
    log = open(log_path, "ab")
    try:
        return subprocess.Popen(argv, env={**os.environ, **env}, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    finally:
        log.close()


def wait_ready(proc: subprocess.Popen, base_url: str, timeout_s: float,
               log_path: str | Path | None = None) -> float:
    """Poll ``GET /v1/models`` until it answers; seconds waited. RuntimeError (with the log's tail) when the
    process exits or ``timeout_s`` passes first."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(base_url.rstrip("/") + "/v1/models", timeout=2) as r:
                if r.status == 200:
                    return time.monotonic() - t0
        except OSError:
            pass
        time.sleep(1.0)
    tail = ""
    if log_path is not None and Path(log_path).is_file():
        tail = "\n".join(Path(log_path).read_text(errors="replace").splitlines()[-25:])
    state = (f"exited with {proc.returncode}" if proc.poll() is not None
             else f"not ready after {timeout_s:.0f} s")
    raise RuntimeError(f"vLLM server {state}; log tail:\n{tail}")


def stop_server(proc: subprocess.Popen, grace_s: float = 20.0) -> None:
    """SIGTERM the server's process group (its pid), then SIGKILL what is left after ``grace_s``."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children (engine core) that outlived the parent
    except ProcessLookupError:
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
