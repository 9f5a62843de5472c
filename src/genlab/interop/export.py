"""Export a genlab checkpoint as a Hugging Face folder: ``python -m genlab.interop.export <ckpt> <out dir>``.

The checkpoint is read safely (``genlab.checkpoints.load``), its model rebuilt from the run's recorded config with
the data's sizes (``run.json``'s ``model_overrides`` in the run folder, else the recorded vocabulary size), its
``model.*`` weights loaded strictly, and the family's ``save_hf_checkpoint`` writes ``config.json`` +
``model.safetensors`` that the matching ``transformers`` class loads with ``from_pretrained`` (Transformer-XL: the
transformers 4.35 layout). The run's tokenizer files are copied beside them when the run recorded one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.utils import instantiate
from torch import nn

from genlab import checkpoints
from genlab.errors import CheckpointError, DataError, UserError

# what a tokenizer folder may hold that transformers' tokenizers read
TOKENIZER_FILES = ("spiece.model", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "vocab.json", "merges.txt")


def interop_module(model: nn.Module) -> Any:
    """The ``genlab.interop.hf_*`` module that writes ``model``'s family."""
    from genlab.interop import hf_bert, hf_funnel, hf_gpt, hf_transfo_xl, hf_xlnet
    from genlab.models.bert import BertForPretraining
    from genlab.models.funnel import FunnelModel
    from genlab.models.funnel_pretraining import FunnelElectra, FunnelForMaskedLM
    from genlab.models.gpt import GPTLMHeadModel
    from genlab.models.transformer_xl import TransformerXL
    from genlab.models.xlnet import XLNetLMHeadModel, XLNetModel

    families = ((GPTLMHeadModel, hf_gpt), (BertForPretraining, hf_bert), ((XLNetLMHeadModel, XLNetModel), hf_xlnet),
                ((FunnelModel, FunnelForMaskedLM, FunnelElectra), hf_funnel), (TransformerXL, hf_transfo_xl))
    for cls, module in families:
        if isinstance(model, cls):
            return module
    raise CheckpointError(f"{type(model).__name__} has no Hugging Face counterpart; export covers GPT-1, BERT, "
                          "XLNet, Funnel-Transformer and Transformer-XL.")


def _sizes(path: Path, ckpt: dict[str, Any]) -> dict[str, Any]:
    """The model arguments the run took from its data."""
    for run_dir in (path.parent.parent, path.parent):  # <run>/checkpoints/x.ckpt, or a .ckpt next to run.json
        info = run_dir / "run.json"
        if info.is_file():
            overrides = json.loads(info.read_text()).get("model_overrides")
            if overrides is not None:
                return dict(overrides)
    vocab = checkpoints.data_identity(ckpt).get("vocab_size")
    return {} if vocab is None else {"vocab_size": vocab}


def load_model(path: str | Path) -> nn.Module:
    """The model of a genlab checkpoint, rebuilt from its recorded config, weights loaded strictly, eval mode."""
    path = Path(path).expanduser()
    ckpt = checkpoints.load(path, key="checkpoint")
    config = checkpoints.run_config(ckpt, path)
    state = checkpoints.submodule_weights(ckpt)
    if not state or "model" not in config:
        raise CheckpointError(f"{path} holds no model.* weights; export reads checkpoints of tasks that keep the "
                              "network as task.model (pretraining runs, GPT finetuning).")
    model_config = {k: v for k, v in config["model"].items()}
    model = instantiate(model_config, **_sizes(path, ckpt), _convert_="all")
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as err:
        raise CheckpointError(f"{path}: its weights do not fit the model its config builds ({err})") from err
    return model.eval()


def copy_tokenizer(path: Path, out: Path) -> list[str]:
    """Copy the tokenizer files of the run that wrote ``path`` into ``out``; the names copied ([] when the run
    recorded no tokenizer file)."""
    from genlab.data.tokenizers.from_checkpoint import SENTENCEPIECE, recorded_tokenizer, tokenizer_file

    try:
        file = tokenizer_file(recorded_tokenizer(path)[0])
    except DataError:
        return []
    if file is None:
        return []
    copied = []
    if file.suffix == ".model" and not (file.parent / SENTENCEPIECE).is_file():
        shutil.copyfile(file, out / SENTENCEPIECE)  # the name HF's SentencePiece tokenizers read
        copied.append(SENTENCEPIECE)
    for name in TOKENIZER_FILES:
        if (file.parent / name).is_file():
            shutil.copyfile(file.parent / name, out / name)
            copied.append(name)
    return copied


def export(checkpoint: str | Path, out: str | Path, allow_differences: bool = False) -> Path:
    """Write the HF folder for ``checkpoint`` into ``out``; returns the weights file. ``allow_differences``: export a
    Transformer-XL whose evaluation settings HF 4.35 lacks (the weights are the same; HF evaluates its own way)."""
    model = load_model(checkpoint)
    out = Path(out).expanduser()
    module = interop_module(model)
    extra = {"allow_differences": allow_differences} if module.__name__.endswith("hf_transfo_xl") else {}
    weights = module.save_hf_checkpoint(model, out, **extra)
    copy_tokenizer(Path(checkpoint).expanduser(), out)
    return weights


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m genlab.interop.export", description=__doc__.split("\n")[0])
    parser.add_argument("checkpoint", help="a genlab .ckpt (e.g. <run>/checkpoints/last.ckpt)")
    parser.add_argument("out", help="the folder to write (config.json, model.safetensors, tokenizer files)")
    parser.add_argument("--allow-differences", action="store_true",
                        help="Transformer-XL: export although HF 4.35 evaluates with other memory/mask settings")
    args = parser.parse_args(argv)
    try:
        weights = export(args.checkpoint, args.out, args.allow_differences)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {weights.parent} ({', '.join(sorted(p.name for p in weights.parent.iterdir()))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
