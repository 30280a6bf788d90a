"""Runs one stage under a profiler and writes what of src/ark it executed (a test helper, run in a subprocess by
tests/test_stage_deps.py): ``python tests/trace_stage.py OUT.json MODULE [hydra overrides]`` runs the stage's entry
point as ``python -m MODULE`` would; MODULE ``ark.stages.distill:tiny`` runs the distill stage's ``run`` on a tiny
random model instead of the embedded one. OUT.json: {"executed": [[file, qualified name, whether a function (else a module's or class's body)]],
"modules": [the ark modules imported]}."""
import inspect
import json
import runpy
import sys
import threading
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[1] / "src" / "ark")
executed: set[tuple[str, str, bool]] = set()


FUNCTION = inspect.CO_OPTIMIZED | inspect.CO_NEWLOCALS  # a function's code; a module's or class's body has neither


def profile(frame, event, arg):
    code = frame.f_code
    if event == "call" and code.co_filename.startswith(SRC):
        executed.add((code.co_filename, code.co_qualname, bool(code.co_flags & FUNCTION)))


def tiny_distill(overrides: list[str]) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ark.config import compose
    from ark.llm.weights import default_gguf_path
    from ark.stages import distill

    path = default_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    torch.manual_seed(0)
    tiny = LlamaForCausalLM(LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, intermediate_size=64,
                                        max_position_embeddings=4096))
    sys.setprofile(profile)
    threading.setprofile(profile)
    distill.run(compose(overrides), tiny, tokenizer)


def main() -> None:
    out, module, overrides = sys.argv[1], sys.argv[2], sys.argv[3:]
    try:
        if module == "ark.stages.distill:tiny":
            tiny_distill(overrides)
        else:
            sys.argv = [module, *overrides]
            sys.setprofile(profile)
            threading.setprofile(profile)
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        if e.code:
            raise
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        Path(out).write_text(json.dumps({"executed": sorted(executed), "modules": sorted(
            m for m in sys.modules if m == "ark" or m.startswith("ark."))}))


if __name__ == "__main__":
    main()
